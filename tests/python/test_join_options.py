"""Options on a joined deserializer from Python: applied or refused, never ignored. Reader
parameters apply to the whole source (as in the configuration language, which refuses the same
thing); a joined deserializer may repeat the source's value, and skip_sequence_ids is its own."""
import pytest

import ctfio


def files(tmp_path):
    a = tmp_path / "a.ctf"
    a.write_text("".join("%d |x %d\n" % (i, i) for i in range(6)))
    b = tmp_path / "b.ctf"
    b.write_text("0 |y 0\n1 |y oops\n2 |y 2\n3 |y 3\n4 |y 4\n5 |y 5\n")
    return str(a), str(b)


def defs(name):
    return ctfio.StreamDefs(**{name: ctfio.StreamDef(field=name, shape=1)})


def test_an_option_the_join_cannot_apply_is_refused(tmp_path):
    a, b = files(tmp_path)
    for key, value in (("max_errors", 5), ("precision", "double"), ("cache_index", True),
                       ("chunk_size_in_bytes", 4096), ("keep_data_in_memory", True)):
        with pytest.raises(ValueError, match=r"deserializers\[1\]\.%s: reader parameters apply "
                                             r"to all deserializers" % key):
            ctfio.MinibatchSource([ctfio.CTFDeserializer(a, defs("x")),
                                   ctfio.CTFDeserializer(b, defs("y"), **{key: value})],
                                  randomize=False)


def test_the_sources_value_repeated_on_the_join_applies(tmp_path):
    a, b = files(tmp_path)
    src = ctfio.MinibatchSource([ctfio.CTFDeserializer(a, defs("x")),
                                 ctfio.CTFDeserializer(b, defs("y"), max_errors=5)],
                                randomize=False, max_errors=5, max_sweeps=1)
    mb = src.next_minibatch(100)
    # The bad row of the joined file is tolerated (and its sequence dropped), as the source says.
    assert mb[src.streams.x].num_sequences == 5
    # Without the source's max_errors the same join stops at the bad row.
    with pytest.raises(ValueError):
        ctfio.MinibatchSource([ctfio.CTFDeserializer(a, defs("x")),
                               ctfio.CTFDeserializer(b, defs("y"), max_errors=5)],
                              randomize=False, max_sweeps=1)
    src = ctfio.MinibatchSource([ctfio.CTFDeserializer(a, defs("x")),
                                 ctfio.CTFDeserializer(b, defs("y"))],
                                randomize=False, max_sweeps=1)
    with pytest.raises(ctfio.ParseError):
        src.next_minibatch(100)
