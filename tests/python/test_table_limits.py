"""Position tables whose frequencies are too fast to compute exactly are
refused by name in Python too (the same library check as the CLI's): t2t
timescales at both ends of the double range gave NaN entries."""
import numpy as np
import pytest

import tokpos


def test_t2t_timescales_at_the_ends_of_the_double_range_are_refused():
    with pytest.raises(ValueError, match=r"base = 1e-308 with min_timescale = 1e\+308.*exceeds the limit 2\^58"):
        tokpos.sinusoidal_table(2, 16, layout="t2t", base=1e-308, min_timescale=1e308)


@pytest.mark.parametrize("layout", ["interleaved", "halves", "fairseq", "t2t", "ggml"])
@pytest.mark.parametrize("base", [5e-324, 1e-308, 1e-10, 0.5, 2.0, 1e308, 1.7976931348623157e308])
def test_extreme_bases_give_finite_tables_or_a_named_refusal(layout, base):
    for min_timescale in ([5e-324, 1.0, 1e308] if layout == "t2t" else [1.0]):
        kwargs = {"min_timescale": min_timescale} if layout == "t2t" else {}
        try:
            t = tokpos.sinusoidal_table(3, 17, layout=layout, base=base, **kwargs)
        except ValueError as e:
            assert "exceeds the limit 2^58" in str(e) and "base = " in str(e)
            continue
        assert np.isfinite(t).all(), (layout, base, min_timescale)
        assert float(np.abs(t).max()) <= 1.0
