"""The replica teams' vote: real disagreement, ties, abstentions, whitespace that does and does
not change the program."""

from __future__ import annotations

from topologies.teams.voting import majority_vote, normalize_program

A = "n = int(input())\nprint(n * 2)\n"
B = "n = int(input())\nprint(n + n + 1)\n"
C = "print(int(input()) ** 2)\n"


def test_majority_wins_over_earlier_minority():
    vote = majority_vote([A, B, B, C])
    assert (vote.winner, vote.votes, vote.buckets) == (1, 2, 3)


def test_full_disagreement_is_a_tie_won_by_the_lowest_index():
    vote = majority_vote([C, A, B])
    assert (vote.winner, vote.votes, vote.buckets) == (0, 1, 3)


def test_tie_between_buckets_goes_to_the_bucket_with_the_lowest_index():
    vote = majority_vote([B, A, A, B])  # 2 vs 2: B's bucket holds index 0
    assert (vote.winner, vote.votes, vote.buckets) == (0, 2, 2)
    vote = majority_vote([None, A, B, B, A])  # A's bucket holds index 1
    assert (vote.winner, vote.votes) == (1, 2)


def test_abstentions_and_blank_programs_do_not_vote():
    assert majority_vote([None, None]).winner is None
    vote = majority_vote(["", "   \n", None, B])
    assert (vote.winner, vote.votes, vote.buckets) == (3, 1, 1)


def test_formatting_and_comments_do_not_split_a_program():
    variants = [A,
                "n=int( input() )\nprint( n*2 )  # double it\n",
                "n = int(input())\n\n\nprint((n * 2))\n",
                "n = int(input())\r\nprint(n * 2)\r\n"]
    vote = majority_vote([B] + variants)
    assert (vote.winner, vote.votes, vote.buckets) == (1, 4, 2)


def test_quote_style_does_not_split_but_string_contents_do():
    assert normalize_program("print('a b')") == normalize_program('print("a b")')
    assert normalize_program("print('a  b')") != normalize_program("print('a b')")


def test_indentation_that_changes_behaviour_splits_the_vote():
    inside = "for i in range(3):\n    x = i\n    print(x)\n"
    after = "for i in range(3):\n    x = i\nprint(x)\n"
    assert " ".join(inside.split()) == " ".join(after.split())  # the old key merged these
    vote = majority_vote([after, inside, inside])
    assert (vote.winner, vote.votes, vote.buckets) == (1, 2, 2)


def test_unparsable_programs_agree_only_with_identical_broken_text():
    broken = "def f(:\n    pass\n"
    vote = majority_vote([broken, broken + "  ", A])
    assert (vote.winner, vote.votes, vote.buckets) == (0, 2, 2)
    assert normalize_program(broken) != normalize_program(A)
