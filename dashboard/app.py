"""kvsim dashboard: the page list. Start with ``make dashboard`` (``streamlit run dashboard/app.py``).

It listens on localhost only (see docs/dashboard.md). The pages are ``views/scenario.py``
(the default: pick and run a scenario) and ``views/N_Name.py`` in the sidebar's order (not
``pages/``, which Streamlit would also list on its own). Results are cached per resolved
scenario, so switching pages never re-runs anything; the chosen scenario, its knob changes
and every page's inputs are kept in the session and in the URL:
``?source=catalogue&file=azure_conversation.yaml&set=replicas.0.count=2`` reproduces a view
(``set=dotted.key=value`` presets knobs).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

VIEWS = Path(__file__).parent / "views"


def main() -> None:
    st.set_page_config(page_title="kvsim", page_icon="🧮", layout="wide")
    pages = [st.Page(VIEWS / "scenario.py", title="Scenario", default=True)]
    for path in sorted(VIEWS.glob("[0-9]_*.py")):
        pages.append(st.Page(path, title=path.stem.split("_", 1)[1].replace("_", " ")))
    st.navigation(pages).run()


main()
