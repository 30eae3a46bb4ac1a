"""Pack selection in the plan tier: the ``pack`` stage and the bin-packing algorithms it uses."""
