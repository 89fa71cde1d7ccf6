"""history.py: reads an allocator history (snap2events.py's or memplan's
TestTraceDebug's JSON), gzipped or plain: the histories written on a GPU are
.json.gz, those in bench/results' .tar.xz archives plain .json since the
forty-first session (bench/results/README.md). Imported by align.py,
bisect.py, peaklive.py and placement.py."""
import gzip, json


def load(path):
    """The history's JSON value, from a gzipped or a plain file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)
