"""The phrase patterns of :class:`mnemovault.guard.sanitise.HeuristicDetector`, one list per
family. They match the *folded* text of :mod:`mnemovault.guard.normalise` (lower case, no
accents, lookalikes and leetspeak read as letters, letter-spaced words joined), except
:data:`RAW` (chat-template markup), which matches the original text.

Written for precision: a word such as "ignore", "system prompt" or "developer" is never enough
on its own. A hit needs an action aimed at the reader (ignore / reveal / override) together
with its object (previous instructions, *your* system prompt, a developer message, the chain
of thought), or a directive that rewrites the reader's answer (``response_directive``). A
match right after a negation ("never reveal your system prompt") does not count
(:data:`NEGATION`).

Each pattern carries *gates*: groups of words of which the folded text must contain at least
one per group (plain substring tests, far cheaper than the regex), so most texts are never
searched by most patterns. A gate is only an optimisation: it lists words every match of its
pattern contains.

Translations of "ignore the previous instructions": Spanish, French, German, Italian,
Portuguese, Dutch, Polish, Russian, Turkish, Chinese (simplified and traditional), Japanese and
Korean (:data:`TRANSLATED`). The other families are English only.
"""

from __future__ import annotations

import re
from typing import Any

from mnemovault.guard.normalise import fold_literal

Pattern = tuple[str, tuple[tuple[str, ...], ...]]
"""A regex over the folded text and its gates (see the module docstring)."""

SEP = r"[^\w.!?;]{0,3}"
"""Between two words of a phrase: up to three non-word characters other than a sentence end,
or nothing (letter-spaced or glued words)."""

_GAPSEP = r"(?:[^\w.!?;]|[.!?](?=[^\w.!?;]{0,2}[\"'”’]))(?:[^\w.!?;]|[.!?](?=[\"'”’])){0,3}"
_GAPWORD = r"\w+(?:[.!?]\w+)*"
# A gap word and a gap separator share no character, so a run of text splits into words one
# way only: the regex engine cannot backtrack into exponentially many splits.


def gap(n: int) -> str:
    """Up to ``n`` arbitrary words (each followed by a separator), within one sentence."""
    return rf"(?:{_GAPWORD}{_GAPSEP}){{0,{n}}}"


def L(alternatives: str) -> str:
    """A regex group for literal phrases: ``"ignore|pay no attention to"``. Words are joined
    by :data:`SEP`; a ``?`` makes the character before it optional; ``l`` also matches ``i``
    (leetspeak ``1`` and ``|`` are read as ``i``); non-ASCII is folded like the input. The
    alternatives are merged into a trie (``ign(?:ore|oring)``), which the regex engine walks
    far faster than a flat alternation, longer alternatives first."""
    trie: dict[str, Any] = {}
    for phrase in alternatives.split("|"):
        atoms: list[str] = []
        for n, word in enumerate(phrase.split()):
            if n:
                atoms.append(SEP)
            for c in fold_literal(word):
                if c == "?":
                    atoms[-1] += "?"
                else:
                    atoms.append("[li]" if c == "l" else re.escape(c))
        node = trie
        for a in atoms:
            node = node.setdefault(a, {})
        node[""] = {}
    return "(?:" + _emit(trie) + ")"


def trie(words: list[str]) -> str:
    """A regex matching any of ``words`` (plain strings), as a trie, longest first."""
    root: dict[str, Any] = {}
    for w in words:
        node = root
        for c in w:
            node = node.setdefault(re.escape(c), {})
        node[""] = {}
    return "(?:" + _emit(root) + ")"


def _emit(node: dict[str, Any]) -> str:
    alts = [a + _emit(sub) for a, sub in sorted(node.items()) if a]
    if not alts:
        return ""
    body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    if "" in node:  # an alternative ends here: the longer ones are tried first
        return "(?:" + body + ")?"
    return body


def _gate(words: str) -> tuple[str, ...]:
    """A gate group: the words folded, each ``l`` also as ``i`` (single words only: glued
    input has no spaces to rely on)."""
    out: set[str] = set()
    for w in words.split("|"):
        assert w and " " not in w and "?" not in w, w
        variants = [""]
        for c in fold_literal(w):
            variants = [v + x for v in variants for x in (("l", "i") if c == "l" else (c,))]
        out.update(variants)
    return tuple(sorted(out))


def P(regex: str, *gates: str) -> Pattern:
    """A pattern and its gate groups (each ``"word|word"``; all groups must be met)."""
    return regex, tuple(_gate(g) for g in gates)


B = r"(?<![a-z])"  # a word starts here
E = r"(?![a-z])"  # a word ends here
_WS = r"[^\w.!?;]{1,3}"

CLAUSE = (r"(?:^|(?<=[.!?;:\n\"'(\[*>|,\-])|(?<=[.!?;:\n\"'(\[*>|,\-] )"
          r"|(?<= and )|(?<= then )|(?<= also )|(?<= but )|(?<= so ))\W{0,3}")
"""The start of a clause: text start, after a sentence or clause mark, or after and/then/..."""

_LEAD = (r"(?:(?:please|kindly|also|then|now|and|so|next|finally|lastly|additionally|further"
         r"|furthermore|moreover|importantly|remember|note)" + _WS + r")*"
         r"(?:(?:can|could|would|will) you(?:" + _WS + r"please)?" + _WS
         + r"|(?:you (?:must|should|need to|have to|are to|will)|make sure to|be sure to"
           r"|remember to|dont forget to|do not forget to|always)" + _WS + r")?")
"""Optional politeness and modal words before a clause's verb."""

NEGATION = re.compile(r"(?<![a-z])(?:not|dont|never|cannot|cant|shouldnt|mustnt|wont|"
                      r"doesnt|didnt|wouldnt|couldnt|neither|nor|without|avoid|refuse to)"
                      r"[^\w.!?;]{1,3}(?:(?:to|ever|please|you|yourself)[^\w.!?;]{1,3}){0,2}$")
"""A negation right before a hit's first word cancels it ("never reveal your system prompt")."""

# -- ignore_instructions ---------------------------------------------------------------
_IGNORE_WORDS = (
    "ignore|ignoring|disregard|disregarding|forget|forgetting|skip|bypass|override|overlook"
    "|neglect|discard|dismiss|drop|abandon|set aside|put aside|throw out|throw away"
    "|pay no attention to|pay no heed to|do not follow|dont follow|do not obey|dont obey"
    "|stop following|stop obeying|no longer follow|cease following|scrap|ditch|nevermind"
    "|never mind|erase|delete|wipe|reset|undo|cancel|void|nullify|invalidate|supersede"
    "|unlearn|overwrite|overrule|rescind|revoke|throw overboard|leave behind|let go of")
_IGNORE_VERB = L(_IGNORE_WORDS)
_G_IGNORE = ("ignor|disregard|forget|skip|bypass|overrid|overlook|neglect|discard|dismiss|drop"
             "|abandon|aside|throw|attention|heed|follow|obey|scrap|ditch|mind|erase|delete"
             "|wipe|reset|undo|cancel|void|nullif|invalidat|supersed|unlearn|overwrit|overrul"
             "|rescind|revoke|behind|let")
_QUAL = L("previous|previously given|prior|above|earlier|preceding|foregoing|aforementioned"
          "|original|initial|former|preexisting|pre existing|first")
_OBJ = L("instructions?|instruction set|directions|directives?|rules|ruleset|rule set"
         "|prompts?|guidelines?|guidance|commands?|orders|constraints?|restrictions?"
         "|policies|policy|programming|context|system prompts?|system messages?"
         "|system instructions?")
_G_OBJ = ("instruction|direction|directive|rule|prompt|guid|command|order|constraint"
          "|restriction|polic|programming|context|message")
_OBJ_STRONG = L("instructions?|directives?|prompts?|guidelines|programming|system prompts?"
                "|system messages?|system instructions?|safety guidelines|content policy"
                "|content policies")
_G_OBJ_STRONG = "instruction|directive|prompt|guideline|programming|message|polic"
_AFTER = L("above|before|given|given to you|you were given|you have been given|you ve been given"
           "|you got|you received|you have received|so far|until now|up to now|up until now"
           "|previously|earlier|before this|from before|preceding this|prior to this"
           "|that came before|that precede this")
_VOID = L("void|null|null and void|cancelled|canceled|revoked|invalid|obsolete|overridden"
          "|overruled|superseded|lifted|suspended|rescinded|no longer valid|no longer apply"
          "|no longer applicable|no longer in effect|no longer relevant|not valid anymore"
          "|not applicable anymore")

IGNORE_INSTRUCTIONS: list[Pattern] = [
    # ignore (all of) the previous (safety) instructions
    P(B + _IGNORE_VERB + SEP + gap(4) + _QUAL + SEP + gap(2) + _OBJ + E, _G_IGNORE, _G_OBJ),
    # the same with the words glued together (letter-spaced input: "ignoreallprevious...")
    P(B + _IGNORE_VERB + SEP
      + L("all|any|the|your|every|all the|all of the|all your|all of your") + "?" + SEP
      + _QUAL + SEP + _OBJ + E, _G_IGNORE, _G_OBJ),
    # ignore all / any / your instructions
    P(B + _IGNORE_VERB + SEP + L("all|any|every|each|your|all your|all of your|any of your"
                                 "|all the|all of the|any of the") + SEP + gap(1)
      + _OBJ_STRONG + E, _G_IGNORE, _G_OBJ_STRONG),
    # ignore the instructions above / you were given
    P(B + _IGNORE_VERB + SEP + L("the|all|any|your|these|those|all the|all of the|all your")
      + "?" + SEP + _OBJ + SEP + _AFTER + E, _G_IGNORE, _G_OBJ),
    # forget everything above / you were told
    P(B + _IGNORE_VERB + SEP + L("everything|all|anything|whatever") + SEP
      + L("above|before this|prior to this|so far|until now|up to now|up to this point"
          "|you were told|you have been told|you ve been told|you were given"
          "|you were instructed|you have been instructed|i said before|said before"
          "|said above|written above|stated above|mentioned above|that came before"
          "|that was said before") + E,
      _G_IGNORE, "everything|all|anything|whatever"),
    # ignore (all of) the above and ...
    P(B + L("ignore|disregard|forget") + SEP + L("all of|all") + "?" + SEP + L("the above")
      + r"(?=" + SEP + r"(?:and|instead|then)" + E + r"|\s*[,:;]|\s*$)",
      "ignor|disregard|forget", "above"),
    # the previous instructions are void
    P(B + L("previous|prior|above|earlier|preceding|original|initial|all previous|all prior"
            "|all earlier|all|any") + SEP + _OBJ_STRONG + SEP
      + L("are|is|were|have been|has been|are now|is now|are hereby|is hereby") + SEP
      + _VOID + E,
      _G_OBJ_STRONG, "void|null|cancel|revoke|invalid|obsolete|overrid|overrul|supersed|lifted"
      "|suspend|rescind|longer|anymore"),
]

_OBJ_FIRST_SPECS: list[tuple[str, str, str, str]] = [
    # (verbs, determiners before the object, objects, qualifiers after/before the object)
    ("ignora|ignore|ignoren|ignorar|olvida|olvide|olviden|olvidar|omite|omita|omitir|descarta"
     "|descarte|descartar|desestima|desestime|haz caso omiso de|hagan caso omiso de"
     "|no hagas caso a|no hagas caso de|pasa por alto|pase por alto",
     "todas las|todas tus|todas sus|las|tus|sus|todo lo",
     "instrucciones|instruccion|indicaciones|ordenes|reglas|directrices|directivas",
     "anteriores|previas|precedentes|de arriba|anterior|previa|dadas|recibidas"),
    ("ignore|ignorez|ignorer|ignores|oublie|oubliez|oublier|ne tiens pas compte des"
     "|ne tenez pas compte des|ne tiens pas compte de|ne tenez pas compte de|fais abstraction des"
     "|faites abstraction des|neglige|negligez|laisse de cote|laissez de cote",
     "toutes les|tous les|les|tes|vos|de toutes les",
     "instructions|instruction|consignes|directives|regles|ordres|indications",
     "precedentes|precedente|anterieures|ci dessus|d avant|davant|donnees|recues"),
    ("ignora|ignorate|ignori|ignorare|dimentica|dimenticate|dimentichi|dimenticare|trascura"
     "|trascurate|tralascia|tralasciate|non considerare|non tenere conto delle|salta",
     "tutte le|le|tue|sue|tutte",
     "istruzioni|istruzione|indicazioni|regole|direttive|ordini|consegne",
     "precedenti|precedente|anteriori|sopra|di prima|ricevute|date"),
    ("ignore|ignora|ignorar|ignorem|esqueca|esquece|esquecer|esquecam|desconsidere|desconsidera"
     "|desconsiderar|descarte|descarta|despreze|despreza|nao siga|nao considere",
     "todas as|as|suas|tuas|todas",
     "instrucoes|instrucao|indicacoes|ordens|regras|diretrizes|diretivas",
     "anteriores|previas|acima|precedentes|anterior|recebidas|dadas"),
]
_QUAL_FIRST_SPECS: list[tuple[str, str, str, str]] = [
    # (verbs, determiners, qualifiers, objects): qualifier before the object
    ("ignoriere|ignorieren sie|ignoriert|ignorieren|ignorier|vergiss|vergessen sie|vergesst"
     "|vergessen|missachte|missachten sie|missachtet|ubergehe|ubergehen sie|uberspringe"
     "|verwirf|verwerfen sie|beachte nicht|beachten sie nicht",
     "alle|alle deine|alle ihre|die|deine|ihre|samtliche",
     "vorherigen|vorigen|bisherigen|fruheren|obigen|vorangegangenen|vorhergehenden"
     "|vorstehenden|alten|ursprunglichen|vorherige|bisherige|fruhere|obige",
     "anweisungen|anweisung|instruktionen|befehle|regeln|vorgaben|anordnungen|richtlinien"),
    ("negeer|negeren|vergeet|vergeten|sla over|veronachtzaam",
     "alle|de|je|jouw|uw|al je",
     "vorige|eerdere|voorgaande|bovenstaande|oude|oorspronkelijke",
     "instructies|instructie|aanwijzingen|opdrachten|regels|richtlijnen"),
    ("zignoruj|ignoruj|zignorujcie|zapomnij|zapomnijcie|pomin|pomincie|olej",
     "wszystkie|twoje|swoje|wszystkie swoje|wszystkie twoje",
     "poprzednie|wczesniejsze|powyzsze|dotychczasowe|poprzednich|wczesniejszych",
     "instrukcje|polecenia|zasady|instrukcji|polecen|wytyczne"),
    ("игнорируй|игнорируйте|проигнорируй|проигнорируйте|игнорировать|забудь|забудьте|забыть"
     "|не обращай внимания на|не обращайте внимания на|отбрось|отбросьте|пропусти|пропустите"
     "|не слушай|не слушайте|не выполняй|не выполняйте",
     "все|свои|твои|ваши|все свои|все твои|все ваши",
     "предыдущие|прежние|прошлые|предшествующие|вышеуказанные|вышеприведенные|старые"
     "|изначальные|предыдущих|прежних|прошлых|первоначальные",
     "инструкции|указания|команды|правила|инструкций|указаний|команд|правил|установки"),
]


def _gate_words(alternatives: str) -> str:
    """A gate group from literal phrases: the first word of each (a single word)."""
    return "|".join(sorted({a.split()[0].replace("?", "") for a in alternatives.split("|")}))


TRANSLATED: list[Pattern] = []
for _verbs, _dets, _objs, _quals in _OBJ_FIRST_SPECS:
    _v, _d, _o, _q = L(_verbs), L(_dets), L(_objs), L(_quals)
    _g = _gate_words(_objs)
    TRANSLATED.append(P(B + _v + SEP + rf"(?:{_d}{SEP})?" + _o + SEP + _q + E, _g))
    TRANSLATED.append(P(B + _v + SEP + rf"(?:{_d}{SEP})?" + _q + SEP + _o + E, _g))
for _verbs, _dets, _quals, _objs in _QUAL_FIRST_SPECS:
    _v, _d, _q, _o = L(_verbs), L(_dets), L(_quals), L(_objs)
    _g = _gate_words(_objs)
    TRANSLATED.append(P(B + _v + SEP + rf"(?:{_d}{SEP})?" + _q + SEP + _o + E, _g))
    # German, Dutch, Polish and Russian also put the verb last (infinitive, imperative)
    TRANSLATED.append(P(B + rf"(?:{_d}{SEP})?" + _q + SEP + _o + SEP + gap(2) + _v + E, _g))
# Turkish: qualifier, object, then the verb
_TR_OBJ = "talimatlari|talimatlar|komutlari|kurallari|yonergeleri|talimatlarin|talimatlarini"
TRANSLATED.append(P(
    B + L("onceki|yukaridaki|daha onceki|tum onceki|butun onceki|onceden verilen") + SEP
    + L(_TR_OBJ) + SEP + gap(2)
    + L("yok say|gormezden gel|unut|dikkate alma|umursama|yok sayin|unutun|gormezden gelin"),
    "talimat|komut|kural|yonerge"))
_ZH_VERBS = ("忽略|忽视|忽視|无视|無視|不要理会|不要理會|不理会|不理會|忘记|忘記|忘掉|抛开|拋開"
             "|放弃|放棄|跳过|跳過|别管|別管|不要管|不用理会|不用理會|不要遵守|不要遵循|停止遵循")
_ZH_QUAL = L("之前|以前|先前|此前|上面|上述|前面|前述|上文|早先|原来|原來|原先|以上|前边|前邊"
             "|刚才|剛才|原有")
_ZH_OBJS = ("指令|指示|说明|說明|命令|提示词|提示詞|提示|规则|規則|要求|设定|設定|指导|指導|约束"
            "|約束|限制")
_CJK_FILL = r"[^.!?;。！？\n]{0,8}"
TRANSLATED += [
    P(L(_ZH_VERBS) + _CJK_FILL + _ZH_QUAL + _CJK_FILL + L(_ZH_OBJS), _ZH_OBJS),
    P(_ZH_QUAL + r"[^.!?;。！？\n]{0,4}" + L(_ZH_OBJS) + _CJK_FILL
      + r"(?:都|全部|一律|统统|統統)?" + SEP
      + L("忽略|无视|無視|作废|作廢|无效|無效|不再适用|不再適用|失效"), _ZH_OBJS),
    # Japanese: (以前の指示を無視して)
    P(L("以前の|前の|上記の|これまでの|先ほどの|先程の|今までの|上の|前述の|元の|最初の")
      + r"[^.!?;。！？\n]{0,6}" + L("指示|命令|指令|ルール|プロンプト|説明|設定|制約")
      + r"[^.!?;。！？\n]{0,8}" + L("無視|忘れ|従わ|破棄"), "無視|忘れ|従わ|破棄"),
    # Korean: (이전 지시를 무시)
    P(L("이전|앞의|앞선|위의|기존|이전의|지금까지의|위에|모든 이전")
      + r"[^.!?;。！？\n]{0,24}" + L("지시|지침|명령|규칙|프롬프트|설명|지시사항|안내")
      + r"[^.!?;。！？\n]{0,30}" + L("무시|잊어|잊으|잊고|따르지"), "무시|잊|따르지"),
]

# -- system_prompt -----------------------------------------------------------------------
_SYSP = L("system prompts?|system messages?|system instructions?|system directives?"
          "|system rules|system text|system context|sys prompt|systemprompt|initial prompt"
          "|original prompt|hidden prompt|secret prompt|pre prompt|preprompt|meta prompt"
          "|metaprompt|base prompt|initial instructions|original instructions|hidden instructions"
          "|secret instructions|internal instructions|prompt instructions|hidden rules"
          "|secret rules|internal rules|prompt text|full prompt|entire prompt|exact prompt"
          "|instructions you were given|instructions you have been given|rules you were given")
_G_SYSP = "system|prompt|instruction|rule|message|directive"
_MOD = L("full|entire|complete|exact|whole|verbatim|original|initial|hidden|secret|internal"
         "|current|actual|real|raw|confidential|private|first|very first") + "?"
_REVEAL_STRONG_WORDS = (
    "reveal|print|print out|output|repeat|recite|dump|leak|disclose|expose|divulge|regurgitate"
    "|reproduce|spell out|type out|write out|write down|read back|read out|echo|paste|copy"
    "|unveil|show|display|tell|give|list|quote")
_REVEAL_STRONG = L(_REVEAL_STRONG_WORDS)
_REVEAL_BROAD_WORDS = (
    _REVEAL_STRONG_WORDS + "|share|return|send|provide|summari?ze|summarise|translate|explain"
    "|describe|state|include|put|insert|encode|render|convert|write|post")
_REVEAL_BROAD = L(_REVEAL_BROAD_WORDS)
_OVERRIDE = L("ignore|disregard|forget|override|bypass|overwrite|overrule|circumvent|escape"
              "|break out of|jailbreak|disable|drop|abandon|discard|replace|delete|erase|wipe"
              "|reset|update|change|modify|rewrite|edit|alter|amend")
_G_SYSP_NAMES = "system|sys"

SYSTEM_PROMPT: list[Pattern] = [
    # reveal your (full) system prompt
    P(B + _REVEAL_BROAD + SEP + L("me|us|to me|to us") + "?" + SEP + gap(3)
      + L("your|yours|all your|all of your|your own") + SEP + _MOD + SEP + _SYSP + E,
      "your", _G_SYSP),
    # print the system prompt (strong verbs only without "your")
    P(B + _REVEAL_STRONG + SEP + L("me|us|to me|to us") + "?" + SEP
      + L("the|its|this|that|any|all|all the|the model s|the assistant s|the ai s") + "?"
      + SEP + _MOD + SEP + _SYSP + E, _G_SYSP),
    # what is your system prompt / what does your system prompt say
    P(B + L("what is|what s|whats|what are|what was|what were|which are|tell me|how long is"
            "|how does|what does|where is") + SEP + L("your|the ai s|the assistant s") + SEP
      + _MOD + SEP + _SYSP + E, _G_SYSP),
    P(B + L("what|which") + SEP + L("instructions|rules|guidelines|directives") + SEP
      + L("were you|have you been|are you|did you get|did you receive|do you have") + SEP
      + L("given|told|provided|programmed with|instructed with|trained with|operating under"
          "|following|before this"), "instruction|rule|guideline|directive"),
    # ignore / override (your) system prompt
    P(B + _OVERRIDE + SEP + L("your|yours|all your|the|this|its|any|all") + "?" + SEP + _MOD
      + SEP + _SYSP + E, _G_SYSP),
    # a fake system prompt: new system prompt, system prompt override, begin system prompt
    P(B + L("new|updated|real|actual|true|revised|override|admin|root|developer|secret|hidden"
            "|latest|modified|corrected") + SEP + L("system prompts?|system messages?"
                                                   "|system instructions?|sys prompt") + E,
      _G_SYSP_NAMES),
    P(B + L("system prompts?|system messages?|system instructions?|sys prompt") + SEP
      + L("override|overrides|update|updated|change|changed|begins?|ends?|starts?|injection"
          "|reset|follows|follow|v2|version 2") + E, _G_SYSP_NAMES),
    P(B + L("begin|start|end|beginning|start of|end of|beginning of|begin of") + SEP
      + L("the|your") + "?" + SEP + L("system prompts?|system messages?|system instructions?")
      + E, "system"),
    P(r"(?:^|\n)\W{0,4}" + L("system prompts?|system messages?|system instructions?"
                              "|sys prompt") + r"\s*:", _G_SYSP_NAMES),
    # the text above / the words above this line
    P(B + _REVEAL_STRONG + SEP + L("me|us") + "?" + SEP
      + L("everything|all|the text|the words|the instructions|all the text|all the words"
          "|the lines") + SEP
      + L("above|before this|above this line|above this message|before this message"
          "|before this line|prior to this") + E, "above|before|prior"),
]

# -- developer_message ------------------------------------------------------------------
_DEVMSG = L("developer messages?|developer instructions?|developer prompts?|developer directives?"
            "|developer override|developer commands?|developer notes? to the ai"
            "|developer notes? to the assistant|developer notes? to the model|dev messages?"
            "|dev instructions?|dev prompt|developer role message|developer role")
_G_DEV = "dev"
_DEV_WORDS = ("developers?|creators?|programmers?|makers?|dev team|development team|engineers?"
              "|trainers?|operators?|openai|anthropic|administrators?|admins?")
_G_DEVS = ("develop|creator|programmer|maker|dev|engineer|trainer|operator|openai|anthropic"
           "|admin")
DEVELOPER_MESSAGE: list[Pattern] = [
    # reveal / ignore / follow the developer message
    P(B + L(_REVEAL_BROAD_WORDS + "|ignore|disregard|forget|override|bypass|obey|follow|heed"
            "|comply with|execute|apply|prioriti?ze|prioritise") + SEP
      + L("me|us") + "?" + SEP + L("the|your|this|that|these|my|its|any|all|all the") + "?"
      + SEP + _MOD + SEP + _DEVMSG + E, _G_DEV),
    # a new developer message / the developer message says
    P(B + L("new|updated|hidden|secret|urgent|priority|override|special|important|additional"
            "|latest|real|actual|following|incoming|official") + SEP + _DEVMSG + E, _G_DEV),
    P(B + _DEVMSG + SEP + L("says|said|reads|states|follows|below|above|overrides|supersedes"
                            "|takes precedence|has priority|begins?|ends?|starts?") + E, _G_DEV),
    P(r"(?:^|\n|[.!?]\s)\W{0,4}" + _DEVMSG + r"\s*:", _G_DEV),
    # a message from your developers
    P(B + L("message|messages|instructions?|note|notes|update|directive|command|orders?"
            "|request") + SEP + L("from|by") + SEP + L("the|your|my|our") + SEP
      + L(_DEV_WORDS) + E, _G_DEVS),
    # I am your developer / your developers want you to
    P(B + L("i am|i m|im|this is|we are|we re|here is|speaking as|as|it s|it is") + SEP
      + L("your|the model s|the assistant s|the ai s") + SEP
      + L("developers?|creators?|programmers?|makers?|dev team|development team|owner"
          "|operator|administrator|admin") + E, _G_DEVS + "|owner"),
    P(B + L("your") + SEP + L(_DEV_WORDS) + SEP
      + L("want|wants|wanted|instruct|instructs|instructed|told|tell|tells|say|says|said|ask"
          "|asks|asked|require|requires|required|order|orders|ordered|authori?ze|authorise"
          "|authorised|authorized|permit|permits|permitted|allow|allows|allowed|have|has"
          "|need|needs") + SEP + gap(1) + L("you|that you") + E, _G_DEVS),
    # developer mode (the jailbreak persona)
    P(B + L("chatgpt|gpt|an ai|ai|assistant|model|llm|claude|gemini|bot|you|yourself") + SEP
      + gap(3) + L("in|with|into|to|enter|entering|under|using|activate|enable") + SEP
      + L("developer mode|dev mode|god mode|debug mode|admin mode|maintenance mode") + E,
      "mode"),
    P(B + L("developer mode|dev mode") + SEP + L("output|outputs|response|responses") + E,
      "mode"),
]

# -- chain_of_thought ------------------------------------------------------------------
_COT = L("chains? of thoughts?|chainofthought|chain of reasoning|scratchpad|scratch pad"
         "|scratchpads|inner monologue|internal monologue|inner dialogue|internal dialogue"
         "|thinking tokens|reasoning tokens|reasoning traces?|thought traces?|thinking traces?"
         "|reasoning chains?|thought chains?|hidden reasoning|internal reasoning"
         "|private reasoning|secret reasoning|hidden thoughts?|internal thoughts?"
         "|private thoughts?|secret thoughts?|hidden thinking|internal thinking|private thinking"
         "|hidden chain|raw reasoning|raw thoughts|raw thinking|unfiltered thoughts"
         "|unfiltered reasoning|internal deliberations?|hidden deliberations?|thinking blocks?"
         "|reasoning blocks?|thinking process|internal process|hidden steps|internal steps"
         "|reasoning process|internal notes|hidden notes|private notes")
_G_COT = ("chain|scratch|monologue|dialogue|token|trace|reasoning|thought|thinking|deliberation"
          "|block|process|steps|notes")
_COT_WEAK = L("reasoning|thoughts|thinking|thought process|deliberations?|reasoning steps")
_REVEAL_COT = L(_REVEAL_BROAD_WORDS + "|explain|walk me through|walk us through|narrate"
                "|verbali?ze|verbalise|spill|surface|emit|detail|think aloud|think out loud")
CHAIN_OF_THOUGHT: list[Pattern] = [
    # show your chain of thought / include the hidden reasoning in your answer
    P(B + _REVEAL_COT + SEP + L("me|us|to me|to us") + "?" + SEP + gap(2)
      + L("your|yours|its|your own|all your|the model s|the assistant s|the ai s") + SEP
      + _MOD + SEP + _COT + E, _G_COT),
    P(B + _REVEAL_STRONG + SEP + L("me|us|to me|to us") + "?" + SEP
      + L("the|all|any|all the|this|that|full|complete|entire") + "?" + SEP + _MOD + SEP
      + _COT + E, _G_COT),
    # reveal your (hidden) reasoning: only the leak-like verbs
    P(B + L("reveal|disclose|expose|leak|dump|divulge|print|print out|output|regurgitate"
            "|unveil") + SEP + L("me|us|to me|to us") + "?" + SEP
      + L("your|all your|your own|its") + SEP + _MOD + SEP + _COT_WEAK + E,
      "reasoning|thought|thinking|deliberation"),
    # what is your chain of thought
    P(B + L("what is|what s|whats|what are|what was|what were") + SEP + L("your|its") + SEP
      + _MOD + SEP + _COT + E, _G_COT),
    # before answering, output your reasoning
    P(B + L("before|prior to|when|while") + SEP
      + L("answering|responding|replying|you answer|you respond|you reply|giving your answer")
      + SEP + r",?" + SEP + L("output|print|write out|write down|reveal|show|dump|list") + SEP
      + L("your|the|all your|all the") + "?" + SEP + _MOD + SEP
      + L("reasoning|thoughts|thinking|thought process") + E,
      "reasoning|thought|thinking"),
]

# -- response_directive (BIPIA-style: instructions that rewrite the reader's answer) -------
_RESP = L("your response|your responses|your reply|your replies|your answer|your answers"
          "|your output|your message|your next response|your next reply|your next answer"
          "|your final answer|your final response|your completion|your response s"
          "|your reply s|your answer s|your message s|the response you give|the answer you give"
          "|the reply you give|every response|every reply|every answer|each response"
          "|each reply|each answer|all your responses|all your answers|all your replies")
_G_RESP = "respon|repl|answer|output|message|completion"
_RESP_WORDS = (r"(?:responses?|replies|reply|answers?|output|messages?|next|final|completion"
               r"|responses|replys)")
_NOT_YOUR_THING = r"(?!your" + _GAPSEP + r"(?!" + _RESP_WORDS + r"))"
"""Not followed by "your <something other than the answer>" ("include your order number in
your reply" asks for the reader's own data: a human request, not an injection)."""
_SEP_NOT_YOUR_THING = r"(?!" + _GAPSEP + r"your" + _GAPSEP + r"(?!" + _RESP_WORDS + r"))"
_CONTENT_VERB = L(
    "add|append|prepend|include|insert|integrate|incorporate|embed|inject|mention|modify"
    "|enhance|augment|promote|tease|hint at|hint|highlight|alter|edit|weave|slip|sneak"
    "|introduce|end|conclude|begin|start|finish|preface|prefix|supplement|enrich|amend|tweak"
    "|infuse|interject|plug|advertise|allude to|spread|blend|feature|intersperse|sprinkle"
    "|squeeze")
_FORMAT_VERB_DISTINCT = L(
    "encode|encrypt|translate|reverse|render|shift|replace|substitute|scramble|jumble"
    "|jumble up|misspell|anagram|anagramize|rearrange|group|combine|remove|convert|express"
    "|spell|transliterate|obfuscate|cipher|capitali?ze|uppercase|lowercase|invert|flip|mirror"
    "|transform|shuffle|randomi?ze|randomise|interleave|strip|reformat|restructure|garble"
    "|hash|compress|abbreviate|pad")
_FORMAT_VERB_GENERIC = L(
    "provide|give|write|deliver|output|respond|reply|answer|return|produce|generate|compose"
    "|type|present|format|structure|use|apply|display|show|make|keep|put|split|break|separate"
    "|mix|swap|exchange|deliver|craft|frame|phrase|word|style|set|formulate|construct|create")
_LANG = ("spanish|french|german|italian|portuguese|russian|chinese|mandarin|japanese|korean"
         "|arabic|hindi|dutch|polish|turkish|swedish|greek|hebrew|latin|klingon|esperanto"
         "|pirate speak|morse")
# digits are read as letters inside words, so "base64" is folded to "base6a": any two
_FORMAT_TERM_CORE = (
    r"base" + SEP + r"[0-9a-z]{2}|hex|hexadecimal|binary|morse|rot" + SEP + r"[0-9a-z]{1,2}"
    r"|ciphers?|caesar|monoalphabetic|substitution|encod(?:ed|ing)|encrypt(?:ed|ion)"
    r"|revers(?:e|ed|al)|backwards?|emojis?|emoticons|upper" + SEP + r"case|lower" + SEP
    + r"case|capitals?|all caps|leetspeak|leet|pig latin|anagram(?:s|med)?|typos?"
    r"|misspell(?:ed|ings?)?|spaces|punctuation|letters|vowels|consonants|symbols|numbers"
    r"|digits|alphanumeric|homophonic|json|xml|yaml|rhymes?|verse|haiku|riddles?"
)
_FORMAT_TERM = r"(?:" + _FORMAT_TERM_CORE + "|" + _LANG + ")"
_FORMAT_TERM_NO_LANG = r"(?:" + _FORMAT_TERM_CORE + ")"
_IN_RESP = (L("in|into|to|within|inside|throughout|at the end of|at the start of"
              "|at the beginning of|at the top of|at the bottom of|before|after|for|with|of"
              "|from|on") + SEP + _RESP)
_CODE_BLOCK = (L("following|below|subsequent|next|given|provided|attached|above") + SEP
               + L("code|python|python code|script|program") + SEP
               + L("snippets?|blocks?|excerpts?|fragments?|segments?|samples?|pieces?|lines?"
                   "|chunks?|portions?|sections?|extracts?|parts?") + E)
_YOUR_CODE = (L("your|the") + SEP + gap(1)
              + L("code|codes|code s|algorithm|solution|solutions|implementation|codebase"
                  "|code base|program|programs|script|project|application|elucidation|response"
                  "|reply|answer|output|work|software|logic|function|development") + E)
RESPONSE_DIRECTIVE: list[Pattern] = [
    # Add "..." to your reply. / Integrate a sentence in your response that ...
    P(CLAUSE + _LEAD + _CONTENT_VERB + E + _GAPSEP + _NOT_YOUR_THING + gap(14) + _IN_RESP + E,
      _G_RESP),
    # Enhance your response by ... / Modify your answer to ... / Begin your reply with ...
    P(CLAUSE + _LEAD + _CONTENT_VERB + E + SEP + _RESP + SEP
      + L("by|to|with|so|so that|and|using|through|in order to") + E, _G_RESP),
    # In your response, include ...
    P(CLAUSE + L("in|within|throughout|at the end of|at the start of|at the beginning of"
                 "|somewhere in|as part of") + SEP + _RESP + r"\W{0,3}" + _LEAD + gap(1)
      + r"(?:" + _CONTENT_VERB + "|" + L(
          "mention|suggest|recommend|promote|claim|encourage|invite|remind|urge|direct"
          "|point|link|hint|tease|stress|emphasi?ze|emphasise|spread|advertise|praise|warn"
          "|tell users|tell readers|ask users|ask readers") + r")" + E
      + _SEP_NOT_YOUR_THING,
      _G_RESP),
    # Encode your response in Base64. / Translate your message to Italian.
    P(CLAUSE + _LEAD + _FORMAT_VERB_DISTINCT + E + _GAPSEP + gap(6) + _RESP + E, _G_RESP),
    # Replace every third letter with its position number.
    P(CLAUSE + _LEAD + L("replace|substitute|swap|convert|change|turn|shift|encode|encrypt")
      + E + _GAPSEP + gap(3) + L("letters?|vowels?|consonants?|characters?") + E + _GAPSEP
      + gap(4) + L("with|by|for|into|to|as|using") + SEP + gap(3)
      + L("symbols?|numbers?|digits?|numerals?|emojis?|positions?|the following|ascii codes?"
          "|codes?") + E, "letter|vowel|consonant|character"),
    # Provide your answer in French. / Use Base16 to display your response.
    P(CLAUSE + _LEAD + _FORMAT_VERB_GENERIC + E + _GAPSEP + gap(6) + _RESP + SEP + gap(7)
      + _FORMAT_TERM + E, _G_RESP),
    P(CLAUSE + _LEAD + _FORMAT_VERB_GENERIC + E + _GAPSEP + gap(4) + _FORMAT_TERM + E
      + _GAPSEP + gap(7) + _RESP + E, _G_RESP),
    # Reply using Base64 encoding. / Reply in reverse.
    P(CLAUSE + _LEAD + L("reply|respond|answer|write back|return your answer") + SEP
      + L("only|exclusively|strictly|entirely|always") + "?" + SEP
      + L("using|in|with|via|as|through") + SEP + gap(2) + _FORMAT_TERM_NO_LANG + E,
      "repl|respond|answer|write|return"),
    # Add the following code snippet in your response / embed the code below in your code
    P(B + _CODE_BLOCK + _GAPSEP + gap(8) + L("in|into|within|behind|to|inside|throughout"
                                             "|as part of|across|of|for") + SEP + gap(2)
      + _YOUR_CODE,
      "snippet|block|excerpt|fragment|segment|sample|piece|line|chunk|portion|section"
      "|extract|part"),
    P(B + L("your|the") + SEP + gap(1) + L("code|algorithm|solution|implementation|codebase"
                                           "|program|script|elucidation|response|reply|answer")
      + SEP + gap(8) + _CODE_BLOCK,
      "snippet|block|excerpt|fragment|segment|sample|piece|line|chunk|portion|section"
      "|extract|part"),
]

FAMILIES: dict[str, list[Pattern]] = {
    "ignore_instructions": IGNORE_INSTRUCTIONS + TRANSLATED,
    "system_prompt": SYSTEM_PROMPT,
    "developer_message": DEVELOPER_MESSAGE,
    "chain_of_thought": CHAIN_OF_THOUGHT,
    "response_directive": RESPONSE_DIRECTIVE,
}
"""Family name -> its patterns over the folded text."""

RAW: dict[str, list[str]] = {
    # chat-template and role markup, matched in the original text (case-insensitive)
    "system_prompt": [
        r"<\|\s*(?:im_start|im_end|system|endoftext|start_header_id|end_header_id|eot_id"
        r"|begin_of_text)\s*\|>",
        r"\[/?\s*(?:INST|SYS|SYSTEM)\s*\]",
        r"<</?\s*SYS\s*>>",
        r"</?\s*(?:system|system[_-]?prompt|system[_-]?message)\s*>",
        r"(?m)^[ \t]*#{1,4}[ \t]*system[ \t]+(?:prompt|message|instructions?)[ \t]*:?[ \t]*$",
    ],
    "developer_message": [
        r"<\|\s*developer\s*\|>",
        r"</?\s*developer(?:[_-]?(?:message|prompt|instructions?))?\s*>",
        r"\[\s*developer(?:\s+message)?\s*\]",
        r"(?m)^[ \t]*#{1,4}[ \t]*developer(?:[ \t]+(?:message|prompt|instructions?))?"
        r"[ \t]*:?[ \t]*$",
    ],
}
"""Family name -> its patterns over the original text."""
