# plugins/storage
