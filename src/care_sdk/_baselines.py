# ruff: noqa: E501  (the conversations are data: one message to a line)
"""Support conversations written for this package (no dataset's text), for context fit to compare
a reply against (:data:`care_sdk.context_fit.SUPPORT_CONVERSATIONS`).

Examples:
    >>> len(CONVERSATIONS), all(c[-1][0] == "user" for c in CONVERSATIONS)
    (8, True)
"""

from __future__ import annotations

CONVERSATIONS: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        ("user", "hello"),
        ("assistant", "Hi there! How are you doing today?"),
        ("user", "not great to be honest. kind of a rough week"),
        ("assistant", "I'm sorry to hear that. Do you want to tell me what made it rough?"),
        ("user", "my landlord told me I have to move out by the end of next month and I have no idea where I'll go"),
    ),
    (
        ("user", "My son is 15 and lately he just shuts himself in his room and barely talks to me."),
        ("assistant", "That must feel lonely for you. How long has it been like this?"),
        ("user", "Since the start of the school year I think. When I ask how his day was he just says fine."),
        (
            "assistant",
            "Teenagers often pull away at that age, but it still hurts when it's your own child. Has anything changed at school?",
        ),
        ("user", "He switched schools because we moved. Maybe he misses his old friends, I never thought about that."),
    ),
    (
        ("user", "I keep putting off my thesis. I sit down to write and end up scrolling on my phone for hours."),
        ("assistant", "It sounds like you really want to get it done but something keeps pulling you away."),
        ("user", "Yes exactly. And then I feel guilty and that makes it even harder to start the next day."),
        ("assistant", "That guilt can turn into a loop. What part of the thesis feels hardest to start?"),
        ("user", "The literature review. There is so much to read and I don't know where to begin."),
        (
            "assistant",
            "When I have faced a pile like that, picking just three papers for one day helped me more than planning the whole thing.",
        ),
        ("user", "Three papers sounds doable. But my supervisor expects a full draft in two weeks."),
    ),
    (
        ("user", "I think I drink too much. It started as a glass of wine after work and now it's most of a bottle."),
        ("assistant", "Thank you for telling me that, it takes courage to say it out loud. How do you feel about it?"),
        ("user", "Ashamed mostly. Nobody knows, I always do it alone at home."),
        ("user", "I tried to stop for a week but I only lasted two days."),
    ),
    (
        ("user", "I've had insomnia for months. I lie awake until 3 or 4 and then I'm a wreck at work."),
        ("assistant", "Months of that would wear anyone down. What goes through your mind while you lie awake?"),
        ("user", "Everything. Bills, my mom's health, things I said in meetings."),
        ("assistant", "So your mind finally gets the quiet to go over all your worries at night."),
        ("user", "Yes, and I'm on my laptop until I go to bed, I know that doesn't help."),
        (
            "assistant",
            "Some people find it easier to write their worries down an hour before bed and put screens away after that. Would you be willing to try something like that?",
        ),
        ("user", "Maybe. I'm just scared nothing will work and I'll lose my job because I'm so tired."),
    ),
    (
        ("user", "Some girls in my class keep posting mean comments about how I look."),
        ("assistant", "That sounds really hurtful. How long has this been going on?"),
        ("user", "A few months. I don't even want to go to school anymore."),
        (
            "assistant",
            "It makes sense that you'd want to avoid the place where it happens. Have you been able to tell anyone, like a teacher or your parents?",
        ),
        ("user", "No, I'm afraid it will get worse if they find out I told."),
    ),
    (
        ("user", "My dad and I had a huge argument about my career. He wants me to take over the family shop."),
        ("assistant", "And it sounds like that's not what you want for yourself?"),
        ("user", "No, I want to be a nurse. He says I'm throwing away everything he built."),
        (
            "assistant",
            "You're caught between your own dream and not wanting to let him down. That's a heavy place to be.",
        ),
        ("user", "Exactly. I love him but I can't live his life."),
    ),
    (
        ("user", "My best friend is getting married and I'm supposed to be happy for her but I just feel left behind."),
        ("assistant", "It's okay to feel both happy for her and sad for yourself. What makes you feel left behind?"),
        ("user", "Everyone around me has a partner and a house and I'm still single and renting a tiny room."),
        ("assistant", "It sounds like you're measuring your life against theirs, and that comparison is painful."),
        ("user", "I guess so. I was doing fine until the engagement party."),
        ("assistant", "Something about that evening stirred all this up. What happened there?"),
        (
            "user",
            "Her aunt asked me when it would be my turn, in front of everyone. I laughed but I went home and cried.",
        ),
    ),
)
"""Eight short exchanges between a user and a supporter, on varied topics and at several stages of
a conversation, ``(role, content)`` in order, each ending with the user's message."""
