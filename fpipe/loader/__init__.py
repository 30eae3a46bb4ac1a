"""Torch integration: the DataLoader over recipes, topology and state_dict.
"""
