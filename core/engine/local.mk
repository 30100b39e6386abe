# core/engine
