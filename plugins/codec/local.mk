# plugins/codec
