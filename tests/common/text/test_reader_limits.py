"""Hostile tabular inputs: CSV quotes left open, repeated column names, `datasets` folders copied in part,
and Parquet / Arrow / CSV cells and rows over `clean.max_record_bytes`."""
import json
import os
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages import clean
from stages.common.text.readers import (OVERSIZED_KEEP_BYTES, FieldMap, InputError, Record, Rejection, check_headers,
                                        iter_raw, list_input_files, parse_raw)
from tests.conftest import ROOT, write_jsonl
from tests.stages.test_clean import make_params

MB = 1 << 20
ROWS = [f"r{i},text of row {i},{i}\n" for i in range(1, 10)]


def read(path, limit=1000, fields=FieldMap()):
    return [parse_raw(raw, limit, fields) for raw in iter_raw([str(path)], limit)]


def write_csv(path, rows, header="id,text,n\n"):
    path.write_bytes((header + "".join(rows)).encode("utf-8", "surrogateescape"))
    return path


# --- CSV: quotes left open ------------------------------------------------------------------------------


@pytest.mark.parametrize("changes, broken", [
    ({3: 'r3,"text of row 3,3\n'}, [3]),  # open to the end of the file
    ({3: 'r3,"text of row 3,3\n', 6: 'r6,"quoted, row 6",6\n'}, [3]),  # closed by row 6's opening quote
    ({3: 'r3,"text of row 3,3\n', 6: 'r6,"a field\nover two lines",6\n'}, [3]),  # row 6 spans two lines itself
    ({3: 'r3,"text of row 3,3\n', 5: 'r5,"oops,5\n'}, [3, 5]),  # two quotes left open
    ({3: 'r3,"text" of row 3,3\n'}, [3]),  # closed mid-field: the line alone does not parse
    ({3: 'r3,"text of row 3,3\n', 7: 'r7,seven,7"\n'}, [3]),  # closed at a line's end: 5 lines make 2 fields
])
def test_a_quote_left_open_costs_only_its_own_row(tmp_path, changes, broken):
    rows = [changes.get(i + 1, row) for i, row in enumerate(ROWS)]
    records = read(write_csv(tmp_path / "a.csv", rows))
    assert len(records) == 9 and [r.index for r in records] == list(range(1, 10))
    dropped = [r for r in records if isinstance(r, Rejection)]
    assert [r.reason for r in dropped] == ["invalid:csv_syntax"] * len(broken)
    assert [json.loads(r.original)["raw"] for r in dropped] == [rows[i - 1] for i in broken]  # the line as read
    kept = {r.id: r.text for r in records if isinstance(r, Record)}
    assert sorted(kept) == sorted(f"r{i}" for i in range(1, 10) if i not in broken)
    if 6 in changes and "\nover" in changes[6]:
        assert kept["r6"] == "a field\nover two lines"


def test_a_quote_left_open_past_the_size_limit_ends_its_record(tmp_path):
    rows = [f"q{i},row {i} of many,{i}\n" for i in range(6000)]  # 120 KB with no quote to close it
    rows[1] = 'q1,"row 1 opens a quote,1\n'
    records = read(write_csv(tmp_path / "a.csv", rows))
    assert len(records) == 6000
    (bad,) = [r for r in records if isinstance(r, Rejection)]
    assert bad.reason == "invalid:csv_syntax" and json.loads(bad.original) == {
        "line": 3, "csv_error": f"field larger than field limit ({OVERSIZED_KEEP_BYTES})", "raw": rows[1]}


def test_no_csv_line_is_read_more_than_twice(tmp_path):
    """Lines that close a quote and open the next (`x",y,"z`) keep one open wherever reading starts: read
    again after the first broken record, they are not read a third time but quarantined together."""
    rows = ['a,"z\n'] + ['x",y,"z\n'] * 3000 + ["r9,last,9\n"]
    first, rest = read(write_csv(tmp_path / "a.csv", rows))
    assert first.reason == rest.reason == "invalid:csv_syntax"
    assert json.loads(first.original)["raw"] + json.loads(rest.original)["raw"] == "".join(rows)


def test_a_csv_syntax_row_keeps_its_raw_bytes(tmp_path):
    path = write_csv(tmp_path / "a.csv", [ROWS[0], 'r2,"caf\udcff" au lait,2\n', ROWS[2]])
    first, bad, third = read(path)
    assert (first.id, third.id) == ("r1", "r3")
    assert bad.reason == "invalid:csv_syntax"
    assert json.loads(bad.original) == {"line": 3, "csv_error": "',' expected after '\"'",
                                        "raw": 'r2,"caf\\xff" au lait,2\n'}


def test_csv_lines_over_the_size_limit_are_quarantined_with_their_start(tmp_path):
    long_text, huge_text = "x" * 5000, "y" * (3 * OVERSIZED_KEEP_BYTES)  # over the limit; over what is held of a line
    path = write_csv(tmp_path / "a.csv", [ROWS[0], f"r2,{long_text},2\n", f"r3,{huge_text},3\n", ROWS[3]])
    first, long_row, huge_row, last = read(path)
    assert (first.id, last.id, last.index) == ("r1", "r4", 4)
    assert long_row.reason == huge_row.reason == "invalid:oversized"
    assert json.loads(long_row.original) == {"line": 3, "raw": f"r2,{long_text},2\n"}
    assert huge_row.original.startswith('{"line": 4, "raw": "r3,yyy')
    assert huge_row.original.endswith(f"[truncated: the first {OVERSIZED_KEEP_BYTES} of {len(huge_text) + 6} bytes "
                                      "are kept]")


def test_a_repeated_csv_column_name_stops_the_run_before_any_work(tmp_path):
    (tmp_path / "raw").mkdir()
    path = write_csv(tmp_path / "raw" / "a.csv", ROWS, header="id,text,text\n")
    with pytest.raises(InputError, match=r"^\S*a\.csv: the header row names column 'text' 2 times; each column "):
        list(iter_raw([str(path)]))
    params = make_params(tmp_path, tmp_path / "raw", num_workers=1)
    with pytest.raises(InputError, match=r"a\.csv: the header row names column 'text' 2 times"):
        clean.run(params)
    assert not os.path.exists(params.out_dir) and not os.path.exists(params.work_dir)



@pytest.mark.parametrize("bad", ["z.csv", "z.parquet"])
def test_a_repeated_column_name_in_a_late_file_stops_the_run_before_any_work(tmp_path, bad):
    # the first file alone fills the look-ahead that checks records before work: only the header check sees z
    (tmp_path / "raw").mkdir()
    write_csv(tmp_path / "raw" / "a.csv", [f"r{i},text of row {i},{i}\n" for i in range(3000)])
    if bad.endswith(".csv"):
        write_csv(tmp_path / "raw" / bad, ROWS, header="id,text,id\n")
    else:
        pq.write_table(pa.table([pa.array(["a"]), pa.array(["b"]), pa.array(["c"])], names=["id", "text", "id"]),
                       tmp_path / "raw" / bad)
    params = make_params(tmp_path, tmp_path / "raw", num_workers=1)
    with pytest.raises(InputError, match=rf"^\S*{re.escape(bad)}: .*column 'id' .*2 times; each column "):
        clean.run(params)
    assert not os.path.exists(params.out_dir) and not os.path.exists(params.work_dir)
    assert check_headers([str(tmp_path / "raw" / "a.csv")]) == 1  # a good header passes

# --- datasets save_to_disk folders ---------------------------------------------------------------------


def test_a_datasets_folder_missing_a_listed_file_is_an_error_before_reading(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"id": [f"d{i}" for i in range(6)], "text": [f"text {i}" for i in range(6)]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "raw" / "single"), num_shards=3)
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict(rows)}
                         ).save_to_disk(str(tmp_path / "raw" / "dict"))
    os.remove(tmp_path / "raw" / "single" / "data-00001-of-00003.arrow")
    with pytest.raises(InputError, match=r"single/state\.json lists 1 data file\(s\) that are missing: "
                                         r"data-00001-of-00003\.arrow; "):
        list_input_files(str(tmp_path / "raw" / "single"))
    params = make_params(tmp_path, tmp_path / "raw", num_workers=1)
    with pytest.raises(clean.ConfigError, match=r"^param 'clean.input': .*missing: data-00001-of-00003\.arrow"):
        clean.run(params)
    assert not os.path.exists(params.out_dir) and not os.path.exists(params.work_dir)
    for name in os.listdir(tmp_path / "raw" / "dict" / "test"):
        os.remove(tmp_path / "raw" / "dict" / "test" / name)
    with pytest.raises(InputError, match=r"dict/dataset_dict\.json lists split\(s\) with no state\.json: test; "):
        list_input_files(str(tmp_path / "raw" / "dict"))


# --- Parquet / Arrow cells and rows over the limit -----------------------------------------------------


def test_huge_parquet_cells_are_quarantined_in_bounded_memory(tmp_path):
    """Cells of 24-32 MB (zstd: the file is a few KB) are read one field at a time, and converted only as far
    as the quarantine keeps them: the reading process's peak over its baseline stays under six times the
    largest cell (pyarrow decodes the Parquet page that holds it whole, in three or four cell-sized
    buffers), where converting the rows to Python took 20 times it. Nor does reading import pandas."""
    big_text, big_meta = "t" * (32 * MB), "m" * (24 * MB)
    num_rows = 8
    pq.write_table(pa.table({
        "id": [f"r{i}" for i in range(num_rows)],
        "text": [big_text if i == 2 else f"an ordinary document, number {i}" for i in range(num_rows)],
        **{name: [big_meta if i == 5 else name for i in range(num_rows)] for name in ("a", "b", "c")},
    }), tmp_path / "huge.parquet", compression="zstd")
    del big_text, big_meta
    code = (  # the peak of this process's own memory: ru_maxrss would include what its parent held when forked
        "import sys\n"
        "from stages.common.text.readers import iter_raw, parse_raw\n"
        "def peak(): return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
        "base = peak()\n"
        "records = [parse_raw(raw, 1_000_000) for raw in iter_raw([sys.argv[1]])]\n"
        "print(peak() - base, 'pandas' in sys.modules)\n"
        "for r in records: print(getattr(r, 'reason', 'kept'), len(getattr(r, 'original', '')), r.id)\n")
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc/self/status (Linux) for the peak")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "huge.parquet")], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    growth_kb, pandas = out[0].split()
    assert int(growth_kb) * 1024 < 6 * 32 * MB and pandas == "False"
    rows = [line.split() for line in out[1:]]
    assert [(reason, row_id) for reason, _, row_id in rows] == [
        ("invalid:oversized" if i in (2, 5) else "kept", f"r{i}") for i in range(num_rows)]
    assert all(OVERSIZED_KEEP_BYTES < int(size) < OVERSIZED_KEEP_BYTES + 100 for reason, size, _ in rows
               if reason != "kept")


def test_a_row_over_the_limit_is_quarantined_with_its_start_whatever_holds_it(tmp_path):
    table = pa.table({
        "id": ["small", "big_text", "big_meta", "many_fields", "big_list"],
        "text": ["fine", "T" * (3 * MB), "fine", "fine", "fine"],
        "url": ["u", "u", "U" * (2 * MB), "u", "u"],
        "extra": [["e"], ["e"], ["e"], ["e"], ["L" * 1000] * 3000],
        **{f"f{i}": ["s", "s", "s", "F" * 300_000, "s"] for i in range(4)},  # each within the limit, not together
    })
    pq.write_table(table, tmp_path / "t.parquet", compression="zstd")
    with pa.ipc.new_stream(tmp_path / "t.arrow", table.schema) as writer:
        writer.write_table(table)
    fields = FieldMap(keep=("url",))
    for path in (tmp_path / "t.parquet", tmp_path / "t.arrow"):
        records = read(path, 1_000_000, fields)
        assert [(r.id, getattr(r, "reason", "")) for r in records] == [("small", "")] + [
            (name, "invalid:oversized") for name in ("big_text", "big_meta", "many_fields", "big_list")]
        assert records[0].kept == {"url": "u"} and records[0].meta["f0"] == "s"
        for r in records[1:]:
            assert len(r.original.encode()) < OVERSIZED_KEEP_BYTES + 100, r.id
            assert r.original.endswith(" bytes are kept]")
        assert records[1].original.startswith('{"id": "big_text", "text": "TTT')
        assert re.search(r'"extra": "<list<\w+: string> value of \d+ bytes>"', records[4].original)  # not converted
        assert [raw.num_bytes for raw in iter_raw([str(path)])][1] > 3 * MB


def test_no_published_field_is_over_the_limit(tmp_path):
    """A JSON line within the limit can be longer rewritten ("1e15" is 1000000000000000.0), and a row's
    fields can each be within it and not together: such records are over the limit as their columns would
    hold them (`meta`, the kept fields), so quarantined, not published."""
    write_jsonl(tmp_path / "a.jsonl", [{"id": "ok", "text": "fine", "n": [1] * 100},
                                       b'{"id": "grows", "text": "fine", "n": [' + b",".join([b"1e15"] * 150) + b"]}"])
    ok, grows = read(tmp_path / "a.jsonl", limit=1000)
    assert isinstance(ok, Record) and grows.reason == "invalid:oversized"
    assert len(grows.original) < 1000 and grows.original.startswith('{"id": "grows"')  # the line as read
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["fine", "fine"], "url": ["u" * 400, "u" * 600],
                             "other": ["o" * 300, "o" * 500]}), tmp_path / "t.parquet")
    a, b = read(tmp_path / "t.parquet", limit=1000, fields=FieldMap(keep=("url",)))
    assert isinstance(a, Record) and len(json.dumps(a.meta)) + len(a.kept["url"]) < 1000
    assert b.reason == "invalid:oversized"


def test_a_repeated_parquet_or_arrow_column_name_is_an_error(tmp_path):
    table = pa.table([pa.array(["a"]), pa.array(["b"])], names=["text", "text"])
    pq.write_table(table, tmp_path / "t.parquet")
    with pa.ipc.new_file(tmp_path / "t.arrow", table.schema) as writer:
        writer.write_table(table)
    for name in ("t.parquet", "t.arrow"):
        with pytest.raises(InputError, match=rf"{name}: column 'text' appears 2 times; each column needs a name"):
            list(iter_raw([str(tmp_path / name)]))
