"""Language codes of multilingual models, and the one table that maps the codes people type to them.

M2M-100 tags a language `__xx__` with its ISO 639-1 code (ISO 639-3 where there is none: `ast`, `ceb`, `ilo`);
NLLB-200 with an ISO 639-3 code and an ISO 15924 script (`deu_Latn`, `zho_Hant`). `--target-lang` and
`--source-lang` take the model's own code, or an ISO 639-1 code (`de`), or an ISO 639-3 one (`deu`) and
are resolved through ISO_639_1_TO_NLLB below; anything else is an error that names the nearest codes the
model has. The code lists are the tokenizers' (fairseq's dictionaries, in their order: a model's tag ids
follow it where the model dir does not list them).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# facebook/m2m100_418M and _1.2B (M2M100Tokenizer's language_codes "m2m100"), in id order.
M2M100_CODES = [
    'af', 'am', 'ar', 'ast', 'az', 'ba', 'be', 'bg', 'bn', 'br', 'bs', 'ca', 'ceb', 'cs', 'cy', 'da', 'de',
    'el', 'en', 'es', 'et', 'fa', 'ff', 'fi', 'fr', 'fy', 'ga', 'gd', 'gl', 'gu', 'ha', 'he', 'hi', 'hr', 'ht',
    'hu', 'hy', 'id', 'ig', 'ilo', 'is', 'it', 'ja', 'jv', 'ka', 'kk', 'km', 'kn', 'ko', 'lb', 'lg', 'ln', 'lo',
    'lt', 'lv', 'mg', 'mk', 'ml', 'mn', 'mr', 'ms', 'my', 'ne', 'nl', 'no', 'ns', 'oc', 'or', 'pa', 'pl', 'ps',
    'pt', 'ro', 'ru', 'sd', 'si', 'sk', 'sl', 'so', 'sq', 'sr', 'ss', 'su', 'sv', 'sw', 'ta', 'th', 'tl', 'tn',
    'tr', 'uk', 'ur', 'uz', 'vi', 'wo', 'xh', 'yi', 'yo', 'zh', 'zu',
]
# facebook/wmt21-dense-24-wide-* (language_codes "wmt21").
WMT21_CODES = [
    'en', 'ha', 'is', 'ja', 'cs', 'ru', 'zh', 'de',
]
# facebook/nllb-200-* (NllbTokenizer's language codes), in id order.
NLLB_CODES = [
    'ace_Arab', 'ace_Latn', 'acm_Arab', 'acq_Arab', 'aeb_Arab', 'afr_Latn', 'ajp_Arab', 'aka_Latn', 'amh_Ethi',
    'apc_Arab', 'arb_Arab', 'ars_Arab', 'ary_Arab', 'arz_Arab', 'asm_Beng', 'ast_Latn', 'awa_Deva', 'ayr_Latn',
    'azb_Arab', 'azj_Latn', 'bak_Cyrl', 'bam_Latn', 'ban_Latn', 'bel_Cyrl', 'bem_Latn', 'ben_Beng', 'bho_Deva',
    'bjn_Arab', 'bjn_Latn', 'bod_Tibt', 'bos_Latn', 'bug_Latn', 'bul_Cyrl', 'cat_Latn', 'ceb_Latn', 'ces_Latn',
    'cjk_Latn', 'ckb_Arab', 'crh_Latn', 'cym_Latn', 'dan_Latn', 'deu_Latn', 'dik_Latn', 'dyu_Latn', 'dzo_Tibt',
    'ell_Grek', 'eng_Latn', 'epo_Latn', 'est_Latn', 'eus_Latn', 'ewe_Latn', 'fao_Latn', 'pes_Arab', 'fij_Latn',
    'fin_Latn', 'fon_Latn', 'fra_Latn', 'fur_Latn', 'fuv_Latn', 'gla_Latn', 'gle_Latn', 'glg_Latn', 'grn_Latn',
    'guj_Gujr', 'hat_Latn', 'hau_Latn', 'heb_Hebr', 'hin_Deva', 'hne_Deva', 'hrv_Latn', 'hun_Latn', 'hye_Armn',
    'ibo_Latn', 'ilo_Latn', 'ind_Latn', 'isl_Latn', 'ita_Latn', 'jav_Latn', 'jpn_Jpan', 'kab_Latn', 'kac_Latn',
    'kam_Latn', 'kan_Knda', 'kas_Arab', 'kas_Deva', 'kat_Geor', 'knc_Arab', 'knc_Latn', 'kaz_Cyrl', 'kbp_Latn',
    'kea_Latn', 'khm_Khmr', 'kik_Latn', 'kin_Latn', 'kir_Cyrl', 'kmb_Latn', 'kon_Latn', 'kor_Hang', 'kmr_Latn',
    'lao_Laoo', 'lvs_Latn', 'lij_Latn', 'lim_Latn', 'lin_Latn', 'lit_Latn', 'lmo_Latn', 'ltg_Latn', 'ltz_Latn',
    'lua_Latn', 'lug_Latn', 'luo_Latn', 'lus_Latn', 'mag_Deva', 'mai_Deva', 'mal_Mlym', 'mar_Deva', 'min_Latn',
    'mkd_Cyrl', 'plt_Latn', 'mlt_Latn', 'mni_Beng', 'khk_Cyrl', 'mos_Latn', 'mri_Latn', 'zsm_Latn', 'mya_Mymr',
    'nld_Latn', 'nno_Latn', 'nob_Latn', 'npi_Deva', 'nso_Latn', 'nus_Latn', 'nya_Latn', 'oci_Latn', 'gaz_Latn',
    'ory_Orya', 'pag_Latn', 'pan_Guru', 'pap_Latn', 'pol_Latn', 'por_Latn', 'prs_Arab', 'pbt_Arab', 'quy_Latn',
    'ron_Latn', 'run_Latn', 'rus_Cyrl', 'sag_Latn', 'san_Deva', 'sat_Beng', 'scn_Latn', 'shn_Mymr', 'sin_Sinh',
    'slk_Latn', 'slv_Latn', 'smo_Latn', 'sna_Latn', 'snd_Arab', 'som_Latn', 'sot_Latn', 'spa_Latn', 'als_Latn',
    'srd_Latn', 'srp_Cyrl', 'ssw_Latn', 'sun_Latn', 'swe_Latn', 'swh_Latn', 'szl_Latn', 'tam_Taml', 'tat_Cyrl',
    'tel_Telu', 'tgk_Cyrl', 'tgl_Latn', 'tha_Thai', 'tir_Ethi', 'taq_Latn', 'taq_Tfng', 'tpi_Latn', 'tsn_Latn',
    'tso_Latn', 'tuk_Latn', 'tum_Latn', 'tur_Latn', 'twi_Latn', 'tzm_Tfng', 'uig_Arab', 'ukr_Cyrl', 'umb_Latn',
    'urd_Arab', 'uzn_Latn', 'vec_Latn', 'vie_Latn', 'war_Latn', 'wol_Latn', 'xho_Latn', 'ydd_Hebr', 'yor_Latn',
    'yue_Hant', 'zho_Hans', 'zho_Hant', 'zul_Latn',
]

# ISO 639-1 (and a few ISO 639-3 codes M2M-100 uses) -> NLLB-200's code. Where NLLB names one language of a
# macrolanguage (Arabic: arb, Persian: pes, Malay: zsm, Latvian: lvs, ...) or one of two scripts (Chinese:
# Hans), the table says which; the other direction (NLLB or ISO 639-3 to an M2M code) reads it backwards.
ISO_639_1_TO_NLLB = {
    "ara": "arb_Arab", "fas": "pes_Arab", "msa": "zsm_Latn", "nor": "nob_Latn", "sqi": "als_Latn", "swa": "swh_Latn",
    "af": "afr_Latn", "ak": "aka_Latn", "am": "amh_Ethi", "ar": "arb_Arab", "as": "asm_Beng", "ay": "ayr_Latn",
    "az": "azj_Latn", "ba": "bak_Cyrl", "be": "bel_Cyrl", "bg": "bul_Cyrl", "bm": "bam_Latn", "bn": "ben_Beng",
    "bo": "bod_Tibt", "bs": "bos_Latn", "ca": "cat_Latn", "cs": "ces_Latn", "cy": "cym_Latn", "da": "dan_Latn",
    "de": "deu_Latn", "dz": "dzo_Tibt", "ee": "ewe_Latn", "el": "ell_Grek", "en": "eng_Latn", "eo": "epo_Latn",
    "es": "spa_Latn", "et": "est_Latn", "eu": "eus_Latn", "fa": "pes_Arab", "ff": "fuv_Latn", "fi": "fin_Latn",
    "fj": "fij_Latn", "fo": "fao_Latn", "fr": "fra_Latn", "ga": "gle_Latn", "gd": "gla_Latn", "gl": "glg_Latn",
    "gn": "grn_Latn", "gu": "guj_Gujr", "ha": "hau_Latn", "he": "heb_Hebr", "hi": "hin_Deva", "hr": "hrv_Latn",
    "ht": "hat_Latn", "hu": "hun_Latn", "hy": "hye_Armn", "id": "ind_Latn", "ig": "ibo_Latn", "is": "isl_Latn",
    "it": "ita_Latn", "ja": "jpn_Jpan", "jv": "jav_Latn", "ka": "kat_Geor", "kg": "kon_Latn", "ki": "kik_Latn",
    "kk": "kaz_Cyrl", "km": "khm_Khmr", "kn": "kan_Knda", "ko": "kor_Hang", "kr": "knc_Latn", "ks": "kas_Arab",
    "ku": "kmr_Latn", "ky": "kir_Cyrl", "lb": "ltz_Latn", "lg": "lug_Latn", "li": "lim_Latn", "ln": "lin_Latn",
    "lo": "lao_Laoo", "lt": "lit_Latn", "lv": "lvs_Latn", "mg": "plt_Latn", "mi": "mri_Latn", "mk": "mkd_Cyrl",
    "ml": "mal_Mlym", "mn": "khk_Cyrl", "mr": "mar_Deva", "ms": "zsm_Latn", "mt": "mlt_Latn", "my": "mya_Mymr",
    "nb": "nob_Latn", "ne": "npi_Deva", "nl": "nld_Latn", "nn": "nno_Latn", "no": "nob_Latn", "ns": "nso_Latn",
    "ny": "nya_Latn", "oc": "oci_Latn", "om": "gaz_Latn", "or": "ory_Orya", "pa": "pan_Guru", "pl": "pol_Latn",
    "ps": "pbt_Arab", "pt": "por_Latn", "qu": "quy_Latn", "rn": "run_Latn", "ro": "ron_Latn", "ru": "rus_Cyrl",
    "rw": "kin_Latn", "sa": "san_Deva", "sc": "srd_Latn", "sd": "snd_Arab", "sg": "sag_Latn", "si": "sin_Sinh",
    "sk": "slk_Latn", "sl": "slv_Latn", "sm": "smo_Latn", "sn": "sna_Latn", "so": "som_Latn", "sq": "als_Latn",
    "sr": "srp_Cyrl", "ss": "ssw_Latn", "st": "sot_Latn", "su": "sun_Latn", "sv": "swe_Latn", "sw": "swh_Latn",
    "ta": "tam_Taml", "te": "tel_Telu", "tg": "tgk_Cyrl", "th": "tha_Thai", "ti": "tir_Ethi", "tk": "tuk_Latn",
    "tl": "tgl_Latn", "tn": "tsn_Latn", "tr": "tur_Latn", "ts": "tso_Latn", "tt": "tat_Cyrl", "tw": "twi_Latn",
    "ug": "uig_Arab", "uk": "ukr_Cyrl", "ur": "urd_Arab", "uz": "uzn_Latn", "vi": "vie_Latn", "wo": "wol_Latn",
    "xh": "xho_Latn", "yi": "ydd_Hebr", "yo": "yor_Latn", "zh": "zho_Hans", "zu": "zul_Latn",
}


# BCP 47 regions that say which script a language is written in (`zh-TW`: Traditional Chinese).
REGION_SCRIPTS = {"zh": {"tw": "hant", "hk": "hant", "mo": "hant", "cn": "hans", "sg": "hans", "my": "hans"}}


def resolve(code: str, available: Iterable[str]) -> str | None:
    """The model's code for `code`: itself, its NLLB code or M2M code through the table, or (ISO 639-3) the one
    model code of that language; None where the model has none. A BCP 47 tag's region is dropped (`pt-BR` is `pt`)
    but may name a script (`zh-TW`: `zho_Hant`); a script asked for is never given another (`zh-Hant` is not M2M-100's
    `zh`, whose script is Hans)."""
    codes = list(available)
    if code in codes:
        return code
    folded = {c.lower(): c for c in codes}
    key = code.lower().replace("-", "_")
    if key in folded:
        return folded[key]
    three, *rest = key.split("_")
    script = next((p for p in rest if len(p) == 4 and p.isalpha()), None)
    region = next((p for p in rest if len(p) == 2 and p.isalpha() or len(p) == 3 and p.isdigit()), None)
    if script is None and region is not None:
        script = REGION_SCRIPTS.get(three, {}).get(region)
    if rest and script is None and region is None:  # `eng_Latm`: no subtag nmt knows
        return None
    own = ISO_639_1_TO_NLLB.get(three)  # "de" -> "deu_Latn"
    candidates = []
    if own is not None:
        candidates.append(own if script is None else f"{own.split('_')[0]}_{script}")
    candidates += [c for c in codes if c.lower().split("_")[0] == three and (script is None or c.lower().endswith("_" + script))]
    # -> M2M's "de": a two-letter code whose language (and script, where one is asked for) is the one asked for
    candidates += [two for two, nllb in ISO_639_1_TO_NLLB.items()
                   if nllb.lower().split("_")[0] in (three, (own or "").lower().split("_")[0])
                   and (script is None or nllb.lower().endswith("_" + script))]
    for candidate in candidates:
        if candidate.lower() in folded:
            return folded[candidate.lower()]
    return None


def nearest(code: str, available: Iterable[str], n: int = 5) -> list[str]:
    """The model's codes most like `code` (for an error message): same language first, then by spelling."""
    codes = list(available)
    key = code.lower()
    same = [c for c in codes if c.lower().startswith(key[:2])]
    by_spelling = difflib.get_close_matches(key, [c.lower() for c in codes], n=n, cutoff=0.3)
    folded = {c.lower(): c for c in codes}
    found = list(dict.fromkeys([*same, *(folded[c] for c in by_spelling)]))
    return found[:n] or codes[:n]


def iso_639_1(code: str) -> str:
    """The ISO 639-1 code of a model's code where the table has one (`deu_Latn` -> `de`, `__de__`'s `de` as is), for
    what knows languages by it (sentence splitting, language detection); else the code's language part."""
    for two, nllb in ISO_639_1_TO_NLLB.items():
        if nllb == code and len(two) == 2:
            return two
    return code.split("_")[0]


def zero_shot(languages: list[str], trained: list[str]) -> list[str]:
    """The directions between `languages` (codes) that no training pair covered (`trained`: "SRC-TGT"), which a
    multilingual model still translates (Johnson et al. 2017, sec. 5: zero-shot translation)."""
    return [f"{s}-{t}" for s in languages for t in languages if s != t and f"{s}-{t}" not in trained]
