# core/tier
