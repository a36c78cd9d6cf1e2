"""Export: SavedModel embedders with raw-string signatures."""

from tfeff.export.embedder import ElmoEmbedderModule
from tfeff.export.embedder import export_embedder
from tfeff.export.embedder import load_embedder
from tfeff.export.model_dir import export_model_dir

__all__ = ["ElmoEmbedderModule", "export_embedder", "export_model_dir", "load_embedder"]
