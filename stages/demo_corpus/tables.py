"""The word lists, templates and HTML skeletons of the demo corpus, read from the data files beside
this module (`data/*.yaml`, `data/html/*.html`). YAML lists become tuples, so the tables are immutable
and compare equal to the Python literals they replaced; the corpus depends on their exact text and order.
"""
from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = Path(__file__).parent / "data"


def _frozen(value: Any) -> Any:
    """YAML lists as tuples, recursively (inside mappings too)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


def load(name: str) -> dict[str, Any]:
    """The tables of one data file, by their lower-case names."""
    data = yaml.safe_load((DATA_DIR / name).read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"{DATA_DIR / name}: top level must be a mapping")
    return {key: _frozen(value) for key, value in data.items()}


def html_template(name: str) -> string.Template:
    """An HTML skeleton with $placeholders, byte for byte (no newline translation)."""
    return string.Template((DATA_DIR / "html" / name).read_bytes().decode("utf-8"))


_SOURCES = load("sources.yaml")
STDLIB_MODULES: tuple[str, ...] = _SOURCES["stdlib_modules"]
PACKAGE_MODULES: tuple[str, ...] = _SOURCES["package_modules"]
CORPUS_DISTRIBUTIONS: tuple[str, ...] = _SOURCES["corpus_distributions"]
QUOTE_STARTS: frozenset[str] = frozenset(_SOURCES["quote_starts"])

_ENGLISH = load("english.yaml")
EN_TEMPLATES: tuple[str, ...] = _ENGLISH["en_templates"]
EN_NOUNS: tuple[str, ...] = _ENGLISH["en_nouns"]
EN_VERBS: tuple[str, ...] = _ENGLISH["en_verbs"]
EN_ADJECTIVES: tuple[str, ...] = _ENGLISH["en_adjectives"]
EN_ADVERBS: tuple[str, ...] = _ENGLISH["en_adverbs"]
MONTHS: tuple[str, ...] = _ENGLISH["months"]
WEEKDAYS: tuple[str, ...] = _ENGLISH["weekdays"]
EN_APHORISMS: tuple[str, ...] = _ENGLISH["en_aphorisms"]
ZEN_FRAMES: tuple[str, ...] = _ENGLISH["zen_frames"]
QUOTE_ATTRIBUTION_EN: tuple[str, ...] = _ENGLISH["quote_attribution_en"]
EN_WORKS: tuple[str, ...] = _ENGLISH["en_works"]

_CHINESE = load("chinese.yaml")
ZH_TECH_TEMPLATES: tuple[str, ...] = _CHINESE["zh_tech_templates"]
ZH_GENERAL_TEMPLATES: tuple[str, ...] = _CHINESE["zh_general_templates"]
ZH_TOOLS: tuple[str, ...] = _CHINESE["zh_tools"]
ZH_COMMANDS: tuple[str, ...] = _CHINESE["zh_commands"]
ZH_OPTIONS: tuple[str, ...] = _CHINESE["zh_options"]
ZH_FILES: tuple[str, ...] = _CHINESE["zh_files"]
ZH_CONCEPTS: tuple[str, ...] = _CHINESE["zh_concepts"]
ZH_PEOPLE: tuple[str, ...] = _CHINESE["zh_people"]
ZH_PLACES: tuple[str, ...] = _CHINESE["zh_places"]
ZH_ACTIONS: tuple[str, ...] = _CHINESE["zh_actions"]
ZH_REASONS: tuple[str, ...] = _CHINESE["zh_reasons"]
ZH_EFFECTS: tuple[str, ...] = _CHINESE["zh_effects"]
ZH_SITUATIONS: tuple[str, ...] = _CHINESE["zh_situations"]
ZH_ASPECTS: tuple[str, ...] = _CHINESE["zh_aspects"]
ZH_DIRECTIONS: tuple[str, ...] = _CHINESE["zh_directions"]
ZH_SEASONS: tuple[str, ...] = _CHINESE["zh_seasons"]
ZH_CROWDS: tuple[str, ...] = _CHINESE["zh_crowds"]
ZH_ACTIVITIES: tuple[str, ...] = _CHINESE["zh_activities"]
ZH_FEATURES: tuple[str, ...] = _CHINESE["zh_features"]
ZH_TOPICS: tuple[str, ...] = _CHINESE["zh_topics"]
ZH_THINGS: tuple[str, ...] = _CHINESE["zh_things"]
ZH_THINGS2: tuple[str, ...] = _CHINESE["zh_things2"]
ZH_FINDINGS: tuple[str, ...] = _CHINESE["zh_findings"]
ZH_CAUSES: tuple[str, ...] = _CHINESE["zh_causes"]
ZH_NUMBERS: tuple[str, ...] = _CHINESE["zh_numbers"]
POEM_NOUNS: tuple[str, ...] = _CHINESE["poem_nouns"]
POEM_VERBS: tuple[str, ...] = _CHINESE["poem_verbs"]
POEM_LEADS: tuple[str, ...] = _CHINESE["poem_leads"]
ZH_SAYINGS: tuple[str, ...] = _CHINESE["zh_sayings"]
ZH_REGRETS: tuple[str, ...] = _CHINESE["zh_regrets"]
ZH_QUOTE_ACTS: tuple[str, ...] = _CHINESE["zh_quote_acts"]
ZH_VIRTUES: tuple[str, ...] = _CHINESE["zh_virtues"]
ZH_LESSONS: tuple[str, ...] = _CHINESE["zh_lessons"]
ZH_CONSEQUENCES: tuple[str, ...] = _CHINESE["zh_consequences"]
ZH_REWARDS: tuple[str, ...] = _CHINESE["zh_rewards"]
ZH_JOURNEYS: tuple[str, ...] = _CHINESE["zh_journeys"]
ZH_QUOTE_THINGS: tuple[str, ...] = _CHINESE["zh_quote_things"]
ZH_QUOTE_TITLES: tuple[str, ...] = _CHINESE["zh_quote_titles"]
ZH_PEN_NAMES: tuple[str, ...] = _CHINESE["zh_pen_names"]
ZH_POEM_HEADERS: tuple[str, ...] = _CHINESE["zh_poem_headers"]

_WEB = load("web.yaml")
AD_EN: tuple[str, ...] = _WEB["ad_en"]
AD_ZH: tuple[str, ...] = _WEB["ad_zh"]
PRODUCTS_EN: tuple[str, ...] = _WEB["products_en"]
PRODUCTS_ZH: tuple[str, ...] = _WEB["products_zh"]
MENU_EN: tuple[str, ...] = _WEB["menu_en"]
MENU_ZH: tuple[str, ...] = _WEB["menu_zh"]
BOILER_EN: tuple[str, ...] = _WEB["boiler_en"]
BOILER_ZH: tuple[str, ...] = _WEB["boiler_zh"]

_SOFTWARE = load("software.yaml")
CLI_OPTIONS: tuple[tuple[str, str, str, str, str], ...] = _SOFTWARE["cli_options"]
CLI_PROGS: tuple[str, ...] = _SOFTWARE["cli_progs"]
ZH_OBJECTS: tuple[str, ...] = _SOFTWARE["zh_objects"]
ZH_OBJECT_VERBS: tuple[str, ...] = _SOFTWARE["zh_object_verbs"]
ZH_MESSAGES: tuple[str, ...] = _SOFTWARE["zh_messages"]
ZH_USAGE: tuple[str, ...] = _SOFTWARE["zh_usage"]
ZH_DESCRIPTIONS: tuple[str, ...] = _SOFTWARE["zh_descriptions"]
ZH_VERSION_LINES: tuple[str, ...] = _SOFTWARE["zh_version_lines"]
ZH_ARGS: tuple[str, ...] = _SOFTWARE["zh_args"]
ZH_WIDGETS: tuple[str, ...] = _SOFTWARE["zh_widgets"]
ZH_WIDGET_PARTS: tuple[str, ...] = _SOFTWARE["zh_widget_parts"]
ZH_MEASURES: tuple[str, ...] = _SOFTWARE["zh_measures"]
ZH_UNITS: tuple[str, ...] = _SOFTWARE["zh_units"]
ZH_UI_EFFECTS: tuple[str, ...] = _SOFTWARE["zh_ui_effects"]
ZH_SETTINGS: tuple[str, ...] = _SOFTWARE["zh_settings"]
ZH_UI_CHOICES: tuple[str, ...] = _SOFTWARE["zh_ui_choices"]
ZH_SETTING_KEYS: tuple[str, ...] = _SOFTWARE["zh_setting_keys"]
ZH_PACKAGE_MESSAGES: tuple[str, ...] = _SOFTWARE["zh_package_messages"]
ZH_BUILTINS: tuple[tuple[str, str, str], ...] = _SOFTWARE["zh_builtins"]
ZH_BUILTIN_LINES: tuple[str, ...] = _SOFTWARE["zh_builtin_lines"]
ZH_BUILTIN_OPTIONS: tuple[str, ...] = _SOFTWARE["zh_builtin_options"]
ZH_BUILTIN_STATUS: tuple[str, ...] = _SOFTWARE["zh_builtin_status"]
ZH_BUILTIN_THINGS: tuple[str, ...] = _SOFTWARE["zh_builtin_things"]
ZH_SHELL_VARS: tuple[str, ...] = _SOFTWARE["zh_shell_vars"]
ZH_EXIT_STATUS: tuple[str, ...] = _SOFTWARE["zh_exit_status"]
EN_OBJECTS: tuple[str, ...] = _SOFTWARE["en_objects"]
EN_MESSAGES: tuple[str, ...] = _SOFTWARE["en_messages"]
EN_USAGE: tuple[str, ...] = _SOFTWARE["en_usage"]
EN_DESCRIPTIONS: tuple[str, ...] = _SOFTWARE["en_descriptions"]
EN_VERSION_LINES: tuple[str, ...] = _SOFTWARE["en_version_lines"]
EN_NOTICES: tuple[str, ...] = _SOFTWARE["en_notices"]
LICENCES: tuple[tuple[str, str, str], ...] = _SOFTWARE["licences"]
NOTICE_PATHS: tuple[str, ...] = _SOFTWARE["notice_paths"]
NOTICE_THINGS: tuple[str, ...] = _SOFTWARE["notice_things"]

_MAN_PAGES = load("man_pages.yaml")
MAN_TITLES_CLI: tuple[str, ...] = _MAN_PAGES["man_titles_cli"]
MAN_TITLES_LIB: tuple[str, ...] = _MAN_PAGES["man_titles_lib"]
MAN_C_LIBRARIES: tuple[str, ...] = _MAN_PAGES["man_c_libraries"]
MAN_C_TYPES: tuple[str, ...] = _MAN_PAGES["man_c_types"]
ZH_MAN_PROGS: tuple[tuple[str, str, str, int], ...] = _MAN_PAGES["zh_man_progs"]
ZH_MAN_OPTIONS: tuple[tuple[str, str, str, str], ...] = _MAN_PAGES["zh_man_options"]
ZH_MAN_OPTION_NOTES: tuple[str, ...] = _MAN_PAGES["zh_man_option_notes"]
ZH_MAN_DESC: tuple[str, ...] = _MAN_PAGES["zh_man_desc"]
ZH_MAN_EXIT: tuple[str, ...] = _MAN_PAGES["zh_man_exit"]
ZH_MAN_FILES: tuple[str, ...] = _MAN_PAGES["zh_man_files"]
ZH_MAN_PATHS: tuple[str, ...] = _MAN_PAGES["zh_man_paths"]
ZH_MAN_ENV: tuple[str, ...] = _MAN_PAGES["zh_man_env"]
ZH_MAN_ENV_TEXT: tuple[str, ...] = _MAN_PAGES["zh_man_env_text"]
ZH_MAN_ARGS: tuple[str, ...] = _MAN_PAGES["zh_man_args"]
ZH_MAN_AUTHOR: tuple[str, ...] = _MAN_PAGES["zh_man_author"]
ZH_MAN_BUGS: tuple[str, ...] = _MAN_PAGES["zh_man_bugs"]
ZH_MAN_HEADINGS: tuple[tuple[str, ...], ...] = _MAN_PAGES["zh_man_headings"]
ZH_MAN_TITLES: dict[int, tuple[str, ...]] = _MAN_PAGES["zh_man_titles"]
ZH_OPTION_ARGS: dict[str, str] = _MAN_PAGES["zh_option_args"]

_DOC_PAGES = load("doc_pages.yaml")
EN_DOC_HEADINGS: tuple[str, ...] = _DOC_PAGES["en_doc_headings"]
EN_DOC_TITLES: tuple[str, ...] = _DOC_PAGES["en_doc_titles"]
ZH_DOC_HEADINGS: tuple[str, ...] = _DOC_PAGES["zh_doc_headings"]
DOC_LABELS: dict[str, dict[str, str]] = _DOC_PAGES["doc_labels"]
SPHINX_THEMES: tuple[str, ...] = _DOC_PAGES["sphinx_themes"]
REFERENCE_COLUMNS: tuple[tuple[str, ...], ...] = _DOC_PAGES["reference_columns"]
REFERENCE_CAPTIONS: tuple[str, ...] = _DOC_PAGES["reference_captions"]
REFERENCE_THINGS: tuple[str, ...] = _DOC_PAGES["reference_things"]

_TRADITIONAL = load("traditional.yaml")
S2T_PHRASES: dict[str, str] = _TRADITIONAL["s2t_phrases"]
S2T_SIMPLIFIED: str = _TRADITIONAL["s2t_simplified"]
S2T_TRADITIONAL: str = _TRADITIONAL["s2t_traditional"]
S2T_CHARS = str.maketrans(S2T_SIMPLIFIED, S2T_TRADITIONAL)

PAGE = html_template("page.html")
SPHINX_PAGE = html_template("sphinx_page.html")
SPHINX_RELATED = html_template("sphinx_related.html")
DOCBOOK_PAGE = html_template("docbook_page.html")
