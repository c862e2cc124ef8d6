"""Typed cards, links and graph, protected cards with OTP, secret maps (SPEC section 7).

Domain code only: nothing here imports a surface. The service ops live in
``engine.service.handlers.cards``; the CLI in ``engine.cli.card_commands``.
"""
