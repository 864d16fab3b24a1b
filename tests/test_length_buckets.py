"""The trainer's forward in length buckets (``train.length_buckets``): each part of the rows padded
only to its own longest completion gives the one padded grid's log-probs, entropies and gradients
to float rounding, and the body really runs on the narrower parts."""
import torch

from scalerl.models.llama import LlamaConfig, LlamaForCausalLM
from scalerl.models.buckets import length_buckets
from scalerl.models.policy import CompletionLogits
from scalerl.precision.base import linear_head


def _model(seed=0):
    cfg = LlamaConfig.from_dict(dict(model_type="llama", vocab_size=40, hidden_size=24, intermediate_size=48,
                                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                     max_position_embeddings=64, tie_word_embeddings=False))
    model = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # the module is built uninitialised (its values come from a checkpoint)
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        model.model.rotary_emb.reset()
    return model.train()


def _batch(prompts=3, group=4, width=5, lengths=(9, 2, 2, 9, 5, 1, 5, 5, 9, 2, 1, 1)):
    """Left-padded prompts (one shorter) and completions with a present prefix of these lengths."""
    g = torch.Generator().manual_seed(1)
    t = max(lengths)
    prompt_ids = torch.randint(1, 40, (prompts, width), generator=g)
    prompt_mask = torch.ones(prompts, width, dtype=torch.long)
    prompt_mask[1, :3] = 0
    tokens = torch.randint(1, 40, (prompts * group, t), generator=g)
    present = (torch.arange(t)[None] < torch.tensor(lengths)[:, None]).long()
    return prompt_ids, prompt_mask, tokens, present, group


def _run(buckets, batch, group=None):
    trainer = CompletionLogits(_model(), linear_head(torch.float32), length_buckets=buckets, min_saved=1)  # every cut
    widths = []  # (rows, positions) of every pass through the first layer
    trainer.model.model.layers[0].register_forward_pre_hook(lambda m, args: widths.append(tuple(args[0].shape[:2])))
    prompt_ids, prompt_mask, tokens, present, g = batch
    logp, ent = trainer(prompt_ids, prompt_mask, tokens, present, g if group is None else group, temperature=0.8)
    w = torch.randn(logp.shape, generator=torch.Generator().manual_seed(2))  # a loss weighting every token differently
    (logp * w * present).sum().backward()
    return logp.detach(), ent, {n: p.grad for n, p in trainer.named_parameters()}, widths[1:]


def test_buckets_give_the_one_grids_logprobs_entropies_and_gradients():
    batch = _batch()
    present = batch[3].bool()
    one, four = _run(1, batch), _run(4, batch)
    torch.testing.assert_close(four[0][present], one[0][present], atol=1e-6, rtol=0)
    torch.testing.assert_close(four[1][present], one[1][present], atol=1e-6, rtol=0)
    assert (four[0][~present] == 0).all() and (four[1][~present] == 0).all()  # nothing past a row's end
    for name, g in one[2].items():
        torch.testing.assert_close(four[2][name], g, atol=1e-6, rtol=1e-5, msg=name)
    # One grid: 12 rows x 8 fed positions. Buckets: lengths 9 (3 rows), 5 (3), 2 (3), 1 (3), each
    # fed one position less than its longest (a 1-token part still runs one).
    assert one[3] == [(12, 8)]
    assert four[3] == [(3, 8), (3, 4), (3, 1), (3, 1)]


def test_buckets_follow_a_micro_batchs_prompt_index():
    """``group`` as a (N,) prompt index per row (a micro-batch): each part keeps its rows' prompts."""
    prompt_ids, prompt_mask, tokens, present, _ = batch = _batch()
    rows = torch.tensor([11, 0, 4, 7, 3])
    sub = (prompt_ids, prompt_mask, tokens[rows], present[rows], None)
    prompt_of = rows // 4
    one, three = _run(1, sub, group=prompt_of), _run(3, sub, group=prompt_of)
    mask = present[rows].bool()
    torch.testing.assert_close(three[0][mask], one[0][mask], atol=1e-6, rtol=0)
    for name, g in one[2].items():
        torch.testing.assert_close(three[2][name], g, atol=1e-6, rtol=1e-5, msg=name)
    full = _run(1, batch)  # and the rows' log-probs are those of the whole batch's forward
    torch.testing.assert_close(three[0][mask], full[0][rows][mask], atol=1e-6, rtol=0)


def test_the_logits_path_keeps_one_grid():
    trainer = CompletionLogits(_model(), linear_head(torch.float32), length_buckets=4)
    prompt_ids, prompt_mask, tokens, present, g = _batch()
    assert trainer(prompt_ids, prompt_mask, tokens, present, g).shape == (12, 9, 40)


def test_cuts_where_they_save_most():
    assert length_buckets([], 4) == []
    assert length_buckets([3, 3], 1) == [[0, 1]]
    # 46 x 2, 37, 28 x 2, 5: the first cut (after 37) saves 3 x 18, the next (before 5) 1 x 23
    assert length_buckets([5, 46, 28, 46, 37, 28], 2) == [[1, 3, 4], [2, 5, 0]]
    assert length_buckets([5, 46, 28, 46, 37, 28], 3) == [[1, 3, 4], [2, 5], [0]]
    assert length_buckets([5, 46, 28, 46, 37, 28], 9) == [[1, 3], [4], [2, 5], [0]]
    # a floor on what a cut must save: 54 passes, the 23 and the 18 do not
    assert length_buckets([5, 46, 28, 46, 37, 28], 9, min_saved=24) == [[1, 3, 4], [2, 5, 0]]
    assert length_buckets([5, 46, 28, 46, 37, 28], 9, min_saved=55) == [[1, 3, 4, 2, 5, 0]]


def test_an_moe_in_buckets_replays_each_rows_experts_and_reports_them_in_the_grids_layout(tmp_path):
    """tiny_moe's shape with routing replay: each part replays its own rows' recorded experts, so the
    log-probs and gradients are the one grid's, and ``routed`` (what the routing metrics read) is
    the one grid's wherever the generator fed a token."""
    from scalerl.generation.engines import SamplingParams, TorchGenerator, left_pad
    from scalerl.models.load import load_checkpoint
    from scalerl.models.policy import Policy
    from scalerl.models.tiny_moe import build_tiny_moe_checkpoint
    from scalerl.routing import ROUTINGS

    path = build_tiny_moe_checkpoint(tmp_path, hidden_size=48, num_layers=2, num_heads=2, num_experts=8,
                                     experts_per_token=2, moe_intermediate_size=48, max_position_embeddings=64, seed=0)
    model, tok = load_checkpoint(path, dtype=torch.float32, device=torch.device("cpu"))
    head = linear_head(torch.float32)
    prompts = [[tok.bos_token_id, 5, 6, 7, 8], [tok.bos_token_id, 9, 10], [tok.bos_token_id, 11]]
    params = SamplingParams(max_new_tokens=12, eos_token_id=-1, pad_token_id=tok.pad_token_id, n=4)
    out = TorchGenerator(Policy(model, gen_head=head, train_head=head), torch.device("cpu")).generate(prompts, params)
    # Cut the rows to spread lengths, as EOS would have: causal, so the kept tokens' log-probs and
    # experts stand; a row's last token is never fed, so it has no experts.
    lengths = torch.tensor([12, 3, 7, 1, 12, 5, 2, 9, 7, 7, 1, 3])
    keep = torch.arange(12)[None] < lengths[:, None]
    present, sampled = out.present & keep, out.sampled & keep
    experts = out.experts.masked_fill(~(torch.arange(12)[None] < lengths[:, None] - 1)[..., None, None], -1)
    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    assert len(length_buckets(lengths.tolist(), 4)) == 4
    replay = ROUTINGS["replay"]

    widths = []  # (rows, positions) of every pass through the first layer
    model.model.layers[0].register_forward_pre_hook(lambda m, args: widths.append(tuple(args[0].shape[:2])))

    def run(buckets):
        from functools import partial
        widths.clear()
        trainer = CompletionLogits(model, head, length_buckets=buckets, min_saved=1)
        trainer.route = partial(replay.fn, cfg=replay.schema(name="replay"))
        model.zero_grad()
        logp, ent = trainer(ids, mask, out.tokens, present.long(), 4, temperature=1.0,
                            experts=(out.prompt_experts[::4], experts))
        w = torch.randn(logp.shape, generator=torch.Generator().manual_seed(2))
        (logp * w * present).sum().backward()
        return logp.detach(), ent, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, \
            trainer.routed[1], widths[1:]

    one, four = run(1), run(4)
    assert one[4] == [(12, 11)] and four[4] == [(3, 11), (4, 6), (3, 2), (2, 1)]  # really in parts
    torch.testing.assert_close(four[0][present], one[0][present], atol=1e-5, rtol=0)
    assert (four[0] - out.logprobs)[sampled].abs().max() < 1e-5  # replay: the generator's own log-probs
    assert set(one[2]) == set(four[2]) and any("gate" in n for n in one[2])  # the gate is trained either way
    for name, g in one[2].items():
        torch.testing.assert_close(four[2][name], g, atol=1e-5, rtol=1e-4, msg=name)
    assert four[3].shape == one[3].shape
    fed = (experts[:, : one[3].shape[1]] >= 0).all(-1).all(-1)
    assert fed.sum() == (lengths - 1).sum() and (four[3][fed] == one[3][fed]).all()
    assert (four[3][fed] == experts[:, : one[3].shape[1]][fed]).all()


def test_cuts_that_save_too_little_are_not_made():
    """The default floor (``MIN_SAVED``): this batch's best cut saves 3 rows x 7 positions, far under
    it, so the forward runs one grid; at 12 times the rows the same lengths are cut."""
    prompt_ids, prompt_mask, tokens, present, g = _batch()
    for rows, expect in ((1, [(12, 8)]), (12, None)):
        trainer = CompletionLogits(_model(), linear_head(torch.float32), length_buckets=4)
        widths = []
        trainer.model.model.layers[0].register_forward_pre_hook(lambda m, args: widths.append(tuple(args[0].shape[:2])))
        trainer(prompt_ids.repeat(rows, 1), prompt_mask.repeat(rows, 1), tokens.repeat(rows, 1), present.repeat(rows, 1),
                g, temperature=0.8)
        assert widths[1:] == expect if expect else len(widths[1:]) > 1
