"""Typed samples (Captioning, VQA, Interleaved, Video...) and the Batch base.
"""
