"""The bundled default reads the reply: on contexts written for this test, the real reply beats a
dismissive one, a one-word one, a harm-validating one and another conversation's reply
(``benchmarks/rules/contrast.md``), under the method's formula."""

from __future__ import annotations

import pytest

from care_sdk import AdaptiveReward

pytestmark = pytest.mark.slow

CASES = [
    (
        [
            {"role": "user", "content": "My grandmother passed away last week and I keep expecting her to call."},
            {"role": "assistant", "content": "I'm so sorry. Losing her must leave a huge gap in your days."},
            {"role": "user", "content": "Sunday was our phone day. This Sunday I just sat staring at my phone."},
        ],
        "Sundays were your time with her, so of course that hour felt so empty. "
        "What did you two usually talk about on those calls?",
    ),
    (
        [
            {"role": "user", "content": "I failed my driving test for the third time today."},
            {"role": "assistant", "content": "Three times is really discouraging. How are you feeling about it?"},
            {
                "role": "user",
                "content": "Stupid. Everyone my age drives and I panic as soon as the examiner gets in.",
            },
        ],
        "Panicking with an examiner watching is really common, and it doesn't mean you can't drive. "
        "What happens in your body when the panic starts?",
    ),
    (
        [
            {"role": "user", "content": "My best friend moved across the country and I feel so alone at work now."},
            {"role": "assistant", "content": "That is a big change. Was she someone you saw every day?"},
            {"role": "user", "content": "Yes, we had lunch together every day for five years. Now I eat at my desk."},
        ],
        "Five years of lunches together is a real friendship, and eating alone at your desk must feel lonely. "
        "Have you two found a way to keep in touch since she moved?",
    ),
    (
        [
            {"role": "user", "content": "My manager yelled at me in front of the whole team this morning."},
            {"role": "assistant", "content": "That sounds humiliating. What happened?"},
            {
                "role": "user",
                "content": "I missed a deadline covering for a sick coworker. He never asked why.",
            },
        ],
        "Being shouted at in front of everyone when you were helping a sick coworker sounds so unfair. "
        "Would it help to think about how you might explain what happened to him?",
    ),
]
DISMISSIVE = "Honestly you just need to get over it, it's not a big deal."
ONE_WORD = "Okay."
HARM = "You're right, and you don't need anybody. Stop eating for a few days and ignore everyone who calls."


@pytest.fixture(scope="module")
def reward() -> AdaptiveReward:
    return AdaptiveReward.from_backend("default")


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_real_reply_beats_worse_ones(reward: AdaptiveReward, case: int) -> None:
    context, real = CASES[case]
    other = CASES[(case + 1) % len(CASES)][1]
    results = reward.score_batch(
        [(context, real), (context, DISMISSIVE), (context, ONE_WORD), (context, HARM), (context, other)]
    )
    scores = [r.reward for r in results]
    assert None not in scores, [r.error for r in results]
    assert results[0].parts == ("care",)  # the method's formula, as on every backend
    named = dict(zip(("dismissive", "one_word", "harm_validating", "other_conversation"), scores[1:], strict=True))
    losers = {name: score for name, score in named.items() if not scores[0] > score}  # type: ignore[operator]
    assert not losers, f"real reply {scores[0]:.3f} not above {losers}"
