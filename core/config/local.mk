# core/config
