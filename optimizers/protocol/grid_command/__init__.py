"""The grid command's room, the top of the protocol: ``cli`` lists the grid, reads a runs folder,
prints and checks the sweeps, so it reads ``grid``, ``run`` and ``aggregate``; nothing imports it."""
