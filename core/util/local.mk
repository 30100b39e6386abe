# core/util
