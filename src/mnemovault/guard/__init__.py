"""Write-time guards on text. :mod:`mnemovault.guard.sanitise`: the injection sanitiser for
imported and tool-supplied text (SPEC section 7), a heuristic behind a small detector
interface; :mod:`mnemovault.guard.normalise`: the de-obfuscation it matches through;
:mod:`mnemovault.guard.patterns`: its phrase patterns; :mod:`mnemovault.guard.capture`: the
capture guard (SPEC section 8: pluggable detectors with severities, fail closed) and the
review gate's initial status; :mod:`mnemovault.guard.detectors`: its built-in detectors
(secrets and credentials, government id numbers)."""
