# core/backend
