"""The Service: typed requests, one dispatcher, session state, intents and audit."""
