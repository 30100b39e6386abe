# plugins/skeleton
