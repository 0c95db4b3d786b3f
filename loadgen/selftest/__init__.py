"""loadgen against itself: a scripted test server, hostile server behaviours, and the client-cost benchmark."""
