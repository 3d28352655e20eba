"""What happens to a sample's pixels: recipes (crop, flip, normalise), user transforms and their
checks, timm configs."""
