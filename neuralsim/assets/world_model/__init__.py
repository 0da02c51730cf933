"""The shipped world model checkpoint (``config.json`` + ``model.safetensors``, written by
``WorldModel.save_pretrained``)."""
