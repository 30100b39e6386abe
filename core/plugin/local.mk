# core/plugin
