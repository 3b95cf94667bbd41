#!/bin/sh
# Regenerates the document fixtures of src/content/document.rs's tests and tests/mount's
# documents test with real writers (Debian's pandoc and groff's gropdf, openpyxl from PyPI):
# each file holds one made-up word found nowhere else, so a search for it names its file.
set -eu
cd "$(dirname "$0")"
md() {
	printf '%% Field notes on %s\n\n# The %s\n\nA sentence about the %s, which appears only in this %s file.\n\nSecond paragraph: pulleys, winches and "quoted words" -- with dashes.\n' "$1" "$1" "$1" "$2"
}
md marmotreel DOCX | pandoc -o sample.docx
md okapiwinch ODT | pandoc -o sample.odt
md dugongspindle EPUB | pandoc -o sample.epub
md ibexpulley PPTX | pandoc -o sample.pptx
md narwhalgrommet HTML | pandoc -s -o sample.html
printf '.TH SAMPLE 7\n.SH NAME\nsample \\- field notes on the quokkasprocket\n.SH DESCRIPTION\nA sentence about the quokkasprocket, which appears only in this PDF file.\n.PP\nSecond paragraph: pulleys, winches and words.\n' | groff -Tpdf -man > sample.pdf
python3 - <<'PY'
import openpyxl
wb = openpyxl.Workbook()
ws = wb.active
ws.title = "Inventory"
ws.append(["part", "count", "note"])
ws.append(["tapirsprocket", 12, "appears only in this XLSX file"])
ws.append(["pulley", 3, "second row"])
wb.save("sample.xlsx")
PY
