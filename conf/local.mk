# conf
