"""Pure functions from bytes to values (text, json, npy, safe pth, images, audio/video).
"""
