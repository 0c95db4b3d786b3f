"""`loadgen sweep`: full runs at several concurrencies or rates, repeats, an SLO search, early stop."""
