"""Length control: interruption insertion and the overlong penalty."""
import torch
from transformers import DynamicCache

from scalerl.generation import SamplingParams
from scalerl.generation.engines.torch_engine import TorchGenerator
from scalerl.length import LENGTHS
from scalerl.length.interrupt import InterruptConfig, interrupt_limits
from scalerl.length.penalty import PenaltyConfig, overlong_penalty

EOS, PAD, FILLER = 2, 0, 7


class ScriptedPolicy:
    """Always emits FILLER (never EOS) unless the last input token is 9, then EOS."""

    routers = None  # a dense policy: nothing to record (models/policy.py)

    def new_cache(self, capacity):
        return DynamicCache()

    def hidden(self, ids, mask, pos, cache=None):
        return ids[:, -1:].float().unsqueeze(-1), cache

    def logits(self, h, side):
        last = h[:, -1].long() if h.dim() == 3 else h.long()
        out = torch.full((h.shape[0], 12), -1e9)
        out[:, FILLER] = 0.0
        out[last.flatten() == 9, FILLER] = -1e9
        out[last.flatten() == 9, EOS] = 0.0
        return out


def _generate(interrupt_at, phrase, answer_budget, max_new=8):
    gen = TorchGenerator(ScriptedPolicy(), torch.device("cpu"))
    params = SamplingParams(max_new_tokens=max_new, eos_token_id=EOS, pad_token_id=PAD, interrupt_at=interrupt_at,
                            force_ids=phrase, answer_budget=answer_budget)
    return gen.generate([[1, 5], [1, 5]], params)


def test_phrase_inserted_at_sampled_position_and_answer_budget_respected():
    phrase = [3, 4, 5]
    g = _generate(torch.tensor([4, 6]), phrase, answer_budget=2)
    # Row 0: 4 free tokens, the 3 phrase tokens, then at most 2 answer tokens.
    assert g.tokens[0, :4].tolist() == [FILLER] * 4
    assert g.tokens[0, 4:7].tolist() == phrase
    assert g.tokens[0, 7:9].tolist() == [FILLER] * 2
    assert int(g.present[0].sum()) == 4 + 3 + 2
    # Row 1 interrupts at 6.
    assert g.tokens[1, 6:9].tolist() == phrase and int(g.present[1].sum()) == 6 + 3 + 2
    # Forced tokens are fed to the model but never trained on.
    assert g.sampled[0].tolist()[:9] == [True] * 4 + [False] * 3 + [True] * 2
    assert g.interrupted.tolist() == [True, True]
    assert g.truncated.tolist() == [True, True]  # no EOS within the answer budget


def test_answer_after_phrase_can_finish():
    # The phrase ends with token 9, after which the scripted model answers EOS.
    g = _generate(torch.tensor([2, 3]), [3, 9], answer_budget=4)
    assert g.tokens[0, :5].tolist() == [FILLER, FILLER, 3, 9, EOS]
    assert g.truncated.tolist() == [False, False] and g.interrupted.tolist() == [True, True]


def test_no_interrupt_means_plain_budget():
    g = _generate(None, [], 0, max_new=5)
    assert g.present.sum(-1).tolist() == [5, 5] and g.truncated.all()


def test_interrupt_limits_samples_inside_bounds():
    cfg = InterruptConfig(max_new_tokens=100, lo=0.8, hi=0.9, answer_budget=10)
    assert cfg.bounds() == (80, 90)
    limits = interrupt_limits(5000, torch.Generator().manual_seed(0), cfg=cfg)
    assert int(limits.interrupt_at.min()) == 80 and int(limits.interrupt_at.max()) == 90
    assert limits.phrase.endswith("</think>") and limits.answer_budget == 10
    assert LENGTHS["truncate"].fn(3, None, cfg=None).interrupt_at is None


def test_overlong_penalty_breakpoints():
    # L_max 14, L_cache 2: zero up to 12, linear to -1 at 14, clipped at -1 beyond.
    lengths = torch.tensor([0, 12, 13, 14, 20])
    assert overlong_penalty(lengths, l_max=14, l_cache=2).tolist() == [0.0, 0.0, -0.5, -1.0, -1.0]
    limits = LENGTHS["penalty"].fn(2, None, cfg=PenaltyConfig(max_new_tokens=8, l_cache=4))
    assert limits.penalty(torch.tensor([4, 6])).tolist() == [0.0, -0.5]


class ThinkingPolicy:
    """Writes 7, then closes its thinking (</think> = tokens 10, 11), then answers 8s; never EOS.

    The next token depends only on the position (the prompt [1, 5] ends at position 1)."""

    SCRIPT = {1: 7, 2: 10, 3: 11}
    routers = None  # a dense policy: nothing to record (models/policy.py)

    def new_cache(self, capacity):
        return DynamicCache()

    def hidden(self, ids, mask, pos, cache=None):
        return pos[:, -1:].float().unsqueeze(-1), cache

    def logits(self, h, side):
        pos = h.reshape(h.shape[0], -1)[:, -1].long()
        nxt = torch.tensor([self.SCRIPT.get(int(q), 8) for q in pos])
        out = torch.full((h.shape[0], 12), -1e9)
        out[torch.arange(h.shape[0]), nxt] = 0.0
        return out


def test_interrupts_only_while_thinking():
    """Row 0 reaches its interruption point (1) still thinking: the phrase is forced. Row 1 reaches
    its point (4) after writing </think> itself: it is answering and must be left alone (the grader
    keeps only the text after the last </think>, so a forced phrase would lose the answer)."""
    phrase = [3, 4, 5]
    params = SamplingParams(max_new_tokens=8, eos_token_id=EOS, pad_token_id=PAD, interrupt_at=torch.tensor([1, 4]),
                            force_ids=phrase, answer_budget=2, think_end_ids=[10, 11])
    g = TorchGenerator(ThinkingPolicy(), torch.device("cpu")).generate([[1, 5], [1, 5]], params)
    assert g.tokens[0, :6].tolist() == [7, 3, 4, 5, 8, 8] and int(g.present[0].sum()) == 6
    assert g.tokens[1, :9].tolist() == [7, 10, 11, 8, 8, 8, 8, 8, 8] and int(g.present[1].sum()) == 9
    assert g.interrupted.tolist() == [True, False]
    assert g.sampled[1, :9].all()  # the answer is the model's own, and trained on


def test_penalty_never_puts_a_correct_answer_at_or_below_a_wrong_one():
    """Rewards {0, 1}: R_len = -1 at the limit used to make a correct answer score 0 (= wrong)."""
    from types import SimpleNamespace

    from scalerl.tasks.base import Grades
    from scalerl.train.rollout import sample_and_score

    class Tok:
        eos_token_id, pad_token_id, bos_token_id = EOS, PAD, None

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) % 12 for c in text]}

        backend_tokenizer = None

        def batch_decode(self, rows, skip_special_tokens=False):
            return ["x" * len(r) for r in rows]

    limits = LENGTHS["penalty"].fn(2, None, cfg=PenaltyConfig(max_new_tokens=8, l_cache=4))
    for wrong, right in ((0.0, 1.0), (-1.0, 1.0)):
        def score(texts, problems, right=right, wrong=wrong):
            ok = [p.answer == "ok" for p in problems]
            return Grades(reward=[right if c else wrong for c in ok], correct=ok)

        task = SimpleNamespace(score=score, correct_reward=right, wrong_reward=wrong)
        problems = [SimpleNamespace(prompt="a", answer="ok"), SimpleNamespace(prompt="b", answer="no")]
        ro = sample_and_score(problems, [0, 1], 1, seeds=torch.tensor([1, 2]), limits=limits,
                              generator=TorchGenerator(ScriptedPolicy(), torch.device("cpu")), tok=Tok(), task=task,
                              max_new_tokens=8, temperature=1.0, device="cpu")
        assert ro.gen.lengths.tolist() == [8, 8]  # both at the limit: R_len = -1
        correct_at_limit, wrong = ro.rewards[:, 0].tolist()
        assert wrong == task.wrong_reward
        assert correct_at_limit == right - (right - wrong) / 2 > wrong  # ±1: 1 + R_len = 0, the paper's value
