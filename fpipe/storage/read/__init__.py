"""Reading prepared datasets: index records, layouts (tar, tables, Energon, remote), readers."""
