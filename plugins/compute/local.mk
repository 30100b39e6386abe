# plugins/compute
