"""Export: SavedModel embedders with raw-string signatures."""

from tfeff.export.embedder import EMBEDDERS
from tfeff.export.embedder import EmbedderModule
from tfeff.export.embedder import TokenIdsEmbedderModule
from tfeff.export.embedder import embedder_module
from tfeff.export.model_dir import export_fasttext
from tfeff.export.model_dir import export_model_dir
from tfeff.export.model_dir import model_dir_embedder
from tfeff.export.saved_embedder import export_embedder
from tfeff.export.saved_embedder import load_embedder
from tfeff.export.saved_embedder import read_metadata

__all__ = ["EMBEDDERS", "EmbedderModule", "TokenIdsEmbedderModule", "embedder_module",
           "export_embedder", "export_fasttext", "export_model_dir", "load_embedder",
           "model_dir_embedder", "read_metadata"]
