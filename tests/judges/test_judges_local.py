"""The local transformers backend with a tiny randomly initialised LLaVA saved to a temp dir (no downloads)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from judges.backends.transformers_backend import TransformersBackend  # noqa: E402
from judges.judge import Judge  # noqa: E402
from judges.registry import make_judge  # noqa: E402
from judges.retry import RetryPolicy  # noqa: E402

from judges_testing import make_episode  # noqa: E402

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


@pytest.fixture(scope="module")
def tiny_vlm_dir(tmp_path_factory):
    """A 2-layer CLIP + 2-layer Llama LLaVA with a character-level tokenizer, saved with save_pretrained."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "<image>": 4}
    for ch in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 {}\":,.-_'!?()\n":
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                        pad_token="<pad>", extra_special_tokens={"image_token": "<image>"})
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    image_cls = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    image_processor = image_cls(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=16,
                               vision_feature_select_strategy="default", chat_template=CHAT_TEMPLATE,
                               image_token="<image>", num_additional_image_tokens=1)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                       image_size=32, patch_size=16, projection_dim=32),
        text_config=LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                                pad_token_id=0, bos_token_id=1, eos_token_id=2),
        image_token_index=4, vision_feature_layer=-1, vision_feature_select_strategy="default",
    )
    d = tmp_path_factory.mktemp("tiny_llava")
    LlavaForConditionalGeneration(config).save_pretrained(d)
    processor.save_pretrained(d)
    return d


def test_random_model_runs_and_garbage_is_a_failed_judgement(tiny_vlm_dir):
    backend = TransformersBackend(str(tiny_vlm_dir), max_new_tokens=6)
    reply = backend.generate(system="be brief", prompt="score it", images=[make_episode(2).collage_frames()[0]] * 2,
                             json_schema=None, timeout_s=10)
    assert isinstance(reply.text, str) and reply.output_tokens <= 6 and reply.input_tokens > 0
    j = Judge("roboworld_progress", backend, cache=False, retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.001))(
        make_episode(num_frames=31))
    assert not j.ok and j.score is None and j.backend == "local" and j.cost_usd == 0.0


def test_valid_generation_is_scored(tiny_vlm_dir, tmp_path, monkeypatch):
    import torch

    judge = make_judge("roboworld_progress", f"local/{tiny_vlm_dir}?max_new_tokens=4&cache_dir={tmp_path}")
    tok = judge.backend.processor.tokenizer
    answer = tok('{"score": 5, "explanation": "cube in bowl"}', add_special_tokens=False, return_tensors="pt").input_ids

    def fake_generate(input_ids=None, **kw):  # what a trained model would emit after the prompt
        return torch.cat([input_ids, answer], dim=1)

    monkeypatch.setattr(judge.backend.vlm, "generate", fake_generate)
    j = judge(make_episode(num_frames=31))
    assert j.ok and j.score == 5.0 and "cube in bowl" in j.rationale
    assert j.output_tokens == answer.shape[1]
    assert judge(make_episode(num_frames=31)).cached


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        make_judge("roboworld_progress", f"local/{tmp_path}/nope")
