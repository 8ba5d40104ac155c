"""Controller mode: the controllers that elect each broker set's master, with ZooKeeper as their consensus."""
