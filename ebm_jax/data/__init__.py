"""Datasets: generated toy data with exact densities, and readers of local real data."""
