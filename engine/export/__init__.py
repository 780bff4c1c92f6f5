"""Export formats of the export job (docs/export.md): ONNX, ONNX Runtime package, TorchScript, torch.export."""
