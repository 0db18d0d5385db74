"""The lexicon's per-lexicon memo (its index and patterns): keyed on identity, so a lookup does not
hash the whole lexicon, and equal lexicons still read the same."""

from __future__ import annotations

from optimizers.gym import lexicon as lexicon_module
from optimizers.gym.lexicon import LACK, Concept, Lexicon, generated, legacy


def test_a_lookup_does_not_hash_the_lexicon() -> None:
    # Sentence lists (not tuples) make the lexicon unhashable: a memo keyed on the lexicon's value
    # (the old lru_cache, which re-hashed 400 concepts per call) raises TypeError here.
    odd = Lexicon("odd", (Concept("a b", ["Mind the a b."], lack=("I forgot a b.",)),  # type: ignore[arg-type]
                          Concept("c d", ["Mind the c d."])))  # type: ignore[arg-type]
    assert odd.concept("c d").forms == ["Mind the c d."]
    assert odd.instructions_in("x Mind the c d. y Mind the a b.") == [("c d", "Mind the c d."), ("a b", "Mind the a b.")]
    assert odd.symptoms_in("I forgot a b.") == [("a b", LACK)]
    assert odd.present("a b", "... Mind the a b. ...") and not odd.present("a b", "Mind the c d.")


def test_equal_lexicons_read_alike_and_each_is_indexed_once() -> None:
    original = generated()
    copy = Lexicon(original.name, tuple(Concept(c.key, c.forms, c.lack, c.excess) for c in original.concepts),
                   original.templates)
    assert copy == original and copy is not original and hash(copy) == hash(original)
    text = " ".join([*original.concepts[7].forms[1:3], original.concepts[3].lack[2], original.concepts[99].excess[0]])
    for reader in (original, copy):
        assert reader.instructions_in(text) == original.instructions_in(text)
        assert reader.symptoms_in(text) == original.symptoms_in(text)
        assert reader.concept("sparse keys") == original.concept("sparse keys")
    assert lexicon_module._index(original) is lexicon_module._index(original)
    assert lexicon_module._patterns(copy) is lexicon_module._patterns(copy)


def test_the_memo_stays_small_and_right_when_many_lexicons_come_and_go() -> None:
    made = [Lexicon(f"l{i}", (Concept(f"k{i}", (f"say {i}.",)),)) for i in range(3 * lexicon_module._MEMO_SIZE)]
    for _ in range(2):
        for i, lex in enumerate(made):
            assert lex.concept(f"k{i}").forms == (f"say {i}.",)
            assert lex.instructions_in(f"x say {i}. y") == [(f"k{i}", f"say {i}.")]
    assert legacy().concept("read_all").forms[0].startswith("Read the whole input")
