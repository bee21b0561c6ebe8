"""Operations: reload, drain and shutdown, workers, readiness."""
