import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.common.runtime.parquet import DOC_SCHEMA, QUARANTINE_SCHEMA, PartWriter, read_table, table_from_rows

SCHEMA = pa.schema([*QUARANTINE_SCHEMA, ("text", pa.large_string()), ("count", pa.int32()), ("x", pa.float64()),
                    ("flag", pa.bool_())])
VALUES = {
    pa.string(): st.none() | st.text(max_size=20), pa.large_string(): st.none() | st.text(max_size=20),
    pa.float32(): st.none() | st.floats(width=32) | st.floats(allow_nan=False, min_value=-1e30, max_value=1e30),
    pa.float64(): st.none() | st.floats(), pa.int64(): st.none() | st.integers(-2**63, 2**63 - 1),
    pa.int32(): st.none() | st.integers(-2**31, 2**31 - 1), pa.bool_(): st.none() | st.booleans(),
}
ROWS = st.lists(st.fixed_dictionaries({}, optional={f.name: VALUES[f.type] for f in SCHEMA}), max_size=20)


@settings(max_examples=200, deadline=None)
@given(ROWS)
def test_rows_become_what_pyarrow_makes_of_them(rows):
    """Columns assembled from buffers hold what pyarrow's conversion makes of the rows (nulls, missing keys,
    float32 rounding, NaN) and are written to the same Parquet bytes."""
    ours, theirs = table_from_rows(rows, SCHEMA), pa.Table.from_pylist(rows, schema=SCHEMA)
    assert ours.schema == theirs.schema and parquet_bytes(ours) == parquet_bytes(theirs)


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def test_written_parts_are_the_bytes_pyarrow_writes(tmp_path):
    rows = [{"id": f"d{i}", "text": "tëxt " * i, "lang": None if i % 3 else "en", "lang_prob": i / 7, "source": "s"}
            for i in range(50)]
    writer = PartWriter(tmp_path / "ours", DOC_SCHEMA, rows_per_part=30)
    for row in rows:
        writer.write(row)
    writer.close()
    (tmp_path / "theirs").mkdir()
    for i, chunk in enumerate((rows[:30], rows[30:])):
        with pq.ParquetWriter(tmp_path / "theirs" / f"part-{i:05d}.parquet", DOC_SCHEMA, compression="zstd") as w:
            w.write_table(pa.Table.from_pylist(chunk, schema=DOC_SCHEMA))
    for name in ("part-00000.parquet", "part-00001.parquet"):
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "theirs" / name).read_bytes()
    assert read_table(tmp_path / "ours").to_pylist() == read_table(tmp_path / "theirs").to_pylist()
