"""Weight conversion between tfeff models and other formats (CoRe merge: see its issue)."""
