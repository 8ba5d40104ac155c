"""`quorumq dashboard`: a live web page over a cluster (server.py serves it and its JSON API; its
page and script are in static/, shipped in the package)."""
