# core/model
