"""Both themes are readable: WCAG contrast of every text/background pair the stylesheet uses.

The colours come from the theme files and the pairs from the stylesheet template, so a
colour changed in either place is checked; only *where* a rule's text sits (a label on
the page or on a card) is written here.
"""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import QSize
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from app.state import style

MIN_CONTRAST = 4.5  # WCAG AA for normal-size text


def luminance(hex_colour: str) -> float:
    value = hex_colour.lstrip("#")
    channels = [int(value[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def template_rules() -> dict[str, dict[str, str]]:
    """Selector -> {property: token} from style.qss (comments dropped, each selector of a list on its own)."""
    text = re.sub(r"/\*.*?\*/", "", (style.RESOURCES / "style.qss").read_text(encoding="utf-8"), flags=re.S)
    rules: dict[str, dict[str, str]] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", text):
        props = {}
        for prop, value in re.findall(r"([a-z-]+)\s*:\s*([^;]+);", body):
            token = re.search(r"@([a-z][a-z0-9-]*)", value)
            if token:
                props[prop] = token.group(1)
        for selector in selectors.split(","):
            rules.setdefault(" ".join(selector.split()), {}).update(props)
    return rules


RULES = template_rules()
PAGE = ("QWidget#pageBody", "background")
CARD = ('QFrame[role="card"]', "background")
BODY_TEXT = ("QWidget", "color")
BUTTON = ("QPushButton", "background")

# (what, text (selector, property), the backgrounds it is drawn on)
PAIRS = [
    ("body text", BODY_TEXT, [PAGE, CARD, ("QTableView", "background"), ("QTableView", "alternate-background-color")]),
    ("heading", ('QLabel[role="h1"]', "color"), [PAGE, CARD]),
    ("subheading", ('QLabel[role="h2"]', "color"), [PAGE, CARD]),
    ("muted text", ('QLabel[role="muted"]', "color"), [PAGE, CARD]),
    ("fact key", ('QLabel[role="factKey"]', "color"), [PAGE, CARD]),
    ("fact value", ('QLabel[role="factValue"]', "color"), [PAGE, CARD]),
    ("error text", ('QLabel[role="error"]', "color"), [PAGE, CARD]),
    ("pill", ('QLabel[role="pill"]', "color"), [('QLabel[role="pill"]', "background")]),
    ("brand", ("QLabel#brand", "color"), [("QLabel#brand", "background")]),
    ("sidebar item", ("QListWidget#sidebar::item", "color"),
     [("QListWidget#sidebar", "background"), ("QListWidget#sidebar::item:hover", "background")]),
    ("sidebar selected", ("QListWidget#sidebar::item:selected", "color"),
     [("QListWidget#sidebar::item:selected", "background")]),
    ("button", BODY_TEXT, [BUTTON, ("QPushButton:hover", "background"), ("QPushButton:pressed", "background")]),
    ("primary button", ('QPushButton[role="primary"]', "color"),
     [('QPushButton[role="primary"]', "background"), ('QPushButton[role="primary"]:hover', "background")]),
    ("danger button", ('QPushButton[role="danger"]', "color"),
     [BUTTON, ('QPushButton[role="danger"]:hover', "background")]),
    ("table selection", ("QTableView", "selection-color"), [("QTableView", "selection-background-color")]),
    ("table header", ("QHeaderView::section", "color"), [("QHeaderView::section", "background")]),
    ("log", ("QPlainTextEdit#log", "color"), [("QPlainTextEdit#log", "background")]),
    ("tab", ("QTabBar::tab", "color"), [PAGE, CARD]),
    ("selected tab", ("QTabBar::tab:selected", "color"), [PAGE, CARD]),
    ("status bar", ("QStatusBar QLabel", "color"), [("QStatusBar", "background")]),
    *[(f"{state} banner", (f'QFrame#banner[state="{state}"] QLabel', "color"),
       [(f'QFrame#banner[state="{state}"]', "background")]) for state in ("starting", "reconnecting", "stopped")],
]


def token_of(selector: str, prop: str) -> str:
    assert selector in RULES, f"style.qss has no rule {selector!r} any more; update PAIRS in this test"
    assert prop in RULES[selector], f"{selector} sets no {prop} colour token in style.qss"
    return RULES[selector][prop]


@pytest.mark.parametrize("theme", style.THEMES)
def test_every_text_colour_is_readable_on_its_background(theme):
    tokens = style.theme_tokens(theme)
    failures = []
    for what, (fg_sel, fg_prop), backgrounds in PAIRS:
        fg = token_of(fg_sel, fg_prop)
        for bg_sel, bg_prop in backgrounds:
            bg = token_of(bg_sel, bg_prop)
            ratio = contrast(tokens[fg], tokens[bg])
            if ratio < MIN_CONTRAST:
                failures.append(f"{what}: @{fg} {tokens[fg]} on @{bg} {tokens[bg]} is {ratio:.2f}:1")
    assert not failures, f"{theme} theme below {MIN_CONTRAST}:1:\n" + "\n".join(failures)


@pytest.mark.parametrize("theme", style.THEMES)
def test_state_colours_are_readable_in_tables(theme):
    """Job states are coloured text in the Runs table (app.widgets.jobs_table.STATE_COLOURS), on plain and alternate rows."""
    tokens = style.theme_tokens(theme)
    states = [name for name in tokens if name.startswith("state-")]
    assert len(states) >= 5
    for name in [*states, "link"]:
        for background in ("surface", "surface-alt"):
            ratio = contrast(tokens[name], tokens[background])
            assert ratio >= MIN_CONTRAST, f"{theme}: @{name} on @{background} is {ratio:.2f}:1"


def test_the_check_catches_a_bad_colour():
    assert contrast("#ffffff", "#e8590c") < MIN_CONTRAST  # the old primary button: why it is darker now
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)


def test_both_themes_fill_every_token_of_the_stylesheet():
    used = {token for props in RULES.values() for token in props.values()}
    for theme in style.THEMES:
        own = set(style.theme_tokens(theme))  # light fills gaps, but each theme should be whole
        assert used <= own, f"{theme} lacks {sorted(used - own)}"
        assert "@" not in style.fill_template((style.RESOURCES / "style.qss").read_text(), style.theme_tokens(theme))


def test_light_theme_keeps_the_original_colours():
    light = style.theme_tokens("light")
    assert (light["bg"], light["surface"], light["text"], light["muted"], light["accent"]) == \
        ("#f6f7f9", "#ffffff", "#1f2328", "#5a6472", "#e8590c")


@pytest.fixture
def restore_look(qapp):
    sheet, palette = qapp.styleSheet(), QPalette(qapp.palette())
    yield qapp
    style.apply_theme(qapp, "light")  # current_theme() back to the default too
    qapp.setStyleSheet(sheet)  # tests run without the stylesheet
    qapp.setPalette(palette)


def test_main_window_in_the_dark_theme_is_dark(restore_look, make_window, qtbot):
    app = restore_look
    assert style.apply_theme(app, "dark") == "dark"
    assert style.current_theme() == "dark"
    window = make_window(start=False, page="settings")
    qtbot.waitExposed(window)
    body = window.grab().toImage()
    assert luminance(body.pixelColor(body.width() - 20, body.height() // 2).name()) < 0.05  # the page, not white
    palette = QApplication.instance().palette()
    assert palette.color(QPalette.ColorRole.Window).lightness() < 60
    assert palette.color(QPalette.ColorRole.WindowText).lightness() > 200
    assert style.colour("bg") == style.theme_tokens("dark")["bg"]
    from app.widgets.charts import LiveChart

    chart = LiveChart("loss")  # charts take the theme's colours when they are made
    qtbot.addWidget(chart)
    assert chart.plot.backgroundBrush().color().name() == style.colour("chart-bg")
    assert style.apply_theme(app, "light") == "light"
    assert app.palette().color(QPalette.ColorRole.Window).lightness() > 200


NON_TEXT_CONTRAST = 3.0  # WCAG 1.4.11: the parts of a control that show its state


@pytest.mark.parametrize("theme", style.THEMES)
def test_a_progress_bar_filled_part_stands_out_from_its_track(theme):
    tokens = style.theme_tokens(theme)
    chunk = tokens[token_of("QProgressBar::chunk", "background")]
    groove = tokens[token_of("QProgressBar", "background")]
    assert contrast(chunk, groove) >= NON_TEXT_CONTRAST, f"{theme}: {chunk} on {groove}"
    for bg_sel, bg_prop in (PAGE, CARD):  # a bar at 100% still reads as full where it sits
        background = tokens[token_of(bg_sel, bg_prop)]
        assert contrast(chunk, background) >= NON_TEXT_CONTRAST, f"{theme}: {chunk} on {background}"


def test_the_old_pale_progress_bar_would_fail():
    # The bars took the palette's highlight, a pale peach: a full bar looked empty.
    light = style.theme_tokens("light")
    assert contrast(light["selection"], light["surface"]) < NON_TEXT_CONTRAST


def opaque_colours(icon, size: int = 48) -> set[str]:
    image = icon.pixmap(QSize(size, size)).toImage()
    return {image.pixelColor(x, y).name() for x in range(size) for y in range(size)
            if image.pixelColor(x, y).alpha() == 255}


@pytest.mark.parametrize("theme", style.THEMES)
def test_a_primary_button_icon_has_the_button_text_colour(restore_look, make_window, theme):
    style.apply_theme(restore_look, theme)
    tokens = style.theme_tokens(theme)
    ink, button = tokens["primary-text"], tokens[token_of('QPushButton[role="primary"]', "background")]
    assert contrast(ink, button) >= NON_TEXT_CONTRAST
    assert opaque_colours(style.icon("new_finetune", ink="primary-text")) == {ink}
    assert opaque_colours(style.icon("new_finetune")) == {tokens["subtle"]}  # elsewhere: the theme's grey
    window = make_window(start=False, page="welcome")
    welcome = window.page("welcome")
    assert welcome.builtin_button.property("role") == "primary"
    assert opaque_colours(welcome.builtin_button.icon()) == {ink}
    assert opaque_colours(welcome.own_data_button.icon()) == {tokens["subtle"]}
