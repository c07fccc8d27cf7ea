"""Write data/default_sft.jsonl.gz: 1,000 synthetic pairs with long-tailed lengths (seed 0).

Run: python scripts/make_default_dataset.py  (deterministic). See nbhelpers/synthetic.py for how.
"""

from pathlib import Path

from nbhelpers.data.synthetic import make, write_jsonl

if __name__ == "__main__":
    out = write_jsonl(make(), Path(__file__).resolve().parents[1] / "data" / "default_sft.jsonl.gz")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
