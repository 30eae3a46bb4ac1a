"""User hooks of the materialize tier: the TaskEncoder protocol, collate and packing helpers.
"""
