// Starts the console once every page module (loaded before this one, in
// document order) has registered its route.
import { start } from '/console/app.js';

start();
