package domain

// identityEvents are the events of API keys and sign-in.
var identityEvents = []EventDef{}
