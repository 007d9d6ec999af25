// inferd chat page: talks to the same-origin OpenAI-compatible API, keeps conversations in
// localStorage and renders answers with a small, escaping markdown renderer.
'use strict';

// ---- Constants --------------------------------------------------------------------------

const STORAGE = {
  conversations: 'inferd.conversations',
  current: 'inferd.current',
  settings: 'inferd.settings',
  apiKey: 'inferd.apiKey',
};
const DEFAULT_SETTINGS = Object.freeze({ systemPrompt: '', temperature: 0.7, topP: 0.95, maxTokens: 1024 });
const SAVE_INTERVAL_MS = 500;   // how often a streaming answer is written to localStorage
const TITLE_LENGTH = 48;
const STICK_TO_BOTTOM_PX = 80;  // follow the answer only if the reader is already at the bottom
const narrowScreen = window.matchMedia('(max-width: 700px)');

const $ = (id) => document.getElementById(id);
const els = {
  app: $('app'),
  sidebar: $('sidebar'),
  sidebarToggle: $('sidebar-toggle'),
  backdrop: $('backdrop'),
  newChat: $('new-chat'),
  conversations: $('conversations'),
  modelName: $('model-name'),
  settingsToggle: $('settings-toggle'),
  settings: $('settings'),
  systemPrompt: $('system-prompt'),
  temperature: $('temperature'),
  topP: $('top-p'),
  maxTokens: $('max-tokens'),
  resetSettings: $('reset-settings'),
  forgetKey: $('forget-key'),
  scroll: $('scroll'),
  empty: $('empty'),
  messages: $('messages'),
  error: $('error'),
  keyForm: $('api-key-form'),
  keyHint: $('api-key-hint'),
  keyInput: $('api-key'),
  composer: $('composer'),
  prompt: $('prompt'),
  send: $('send'),
  stop: $('stop'),
};

const state = {
  conversations: [],
  currentId: null,        // null: a new chat, created on its first message
  settings: { ...DEFAULT_SETTINGS },
  apiKey: '',
  model: null,
  modelRequest: null,     // the /v1/models request in flight, shared by its callers
  run: null,              // the answer being streamed; only one at a time
  editing: null,          // index of the user message being edited in the current chat
  afterKey: new Map(),    // requests that failed with 401, retried once a key is entered
  openReasoning: new WeakSet(), // messages whose reasoning the reader unfolded
  saveTimer: 0,
  renderQueued: false,
};

// ---- Errors ---------------------------------------------------------------------------

class ApiError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
  }
}

// Kept apart from TypeError so that a bug in this file is not reported as a network failure.
class NetworkError extends Error {
  constructor(message) {
    super(message);
    this.name = 'NetworkError';
  }
}

const unreachableMessage = () => `Cannot reach the server at ${location.origin}`;

function showError(message) {
  els.error.textContent = message;
  els.error.hidden = false;
  scrollToBottom();
}

function hideError() {
  els.error.hidden = true;
  els.error.textContent = '';
}

// ---- Storage --------------------------------------------------------------------------

function readStorage(key) {
  try {
    return localStorage.getItem(key);
  } catch {
    return null; // storage disabled: run without persistence
  }
}

function writeStorage(key, value) {
  try {
    if (value == null) localStorage.removeItem(key);
    else localStorage.setItem(key, value);
  } catch {
    // Quota exceeded or storage disabled: the page keeps working from memory.
  }
}

function readJson(key) {
  try {
    return JSON.parse(readStorage(key));
  } catch {
    return null;
  }
}

function loadSettings() {
  const saved = readJson(STORAGE.settings) || {};
  state.settings = {
    systemPrompt: typeof saved.systemPrompt === 'string' ? saved.systemPrompt : DEFAULT_SETTINGS.systemPrompt,
    temperature: clampNumber(saved.temperature, 0, 2, DEFAULT_SETTINGS.temperature),
    topP: clampNumber(saved.topP, 0, 1, DEFAULT_SETTINGS.topP),
    maxTokens: Math.round(clampNumber(saved.maxTokens, 1, 1e7, DEFAULT_SETTINGS.maxTokens)),
  };
}

function saveSettings() {
  writeStorage(STORAGE.settings, JSON.stringify(state.settings));
}

function loadConversations() {
  const list = readJson(STORAGE.conversations);
  state.conversations = Array.isArray(list) ? list.filter(isConversation).map(restoreConversation) : [];
  const current = readStorage(STORAGE.current);
  state.currentId = state.conversations.some((c) => c.id === current) ? current : null;
}

function isConversation(c) {
  return c && typeof c.id === 'string' && Array.isArray(c.messages);
}

function restoreConversation(c) {
  const messages = c.messages.filter(
    (m) => m && (m.role === 'user' || m.role === 'assistant') && typeof m.content === 'string');
  for (const m of messages) {
    // The page was closed while this answer streamed: what was saved is all there is.
    if (m.pending) {
      m.pending = false;
      m.stopped = true;
    }
  }
  return { ...c, title: typeof c.title === 'string' ? c.title : '', messages };
}

function saveConversations() {
  clearTimeout(state.saveTimer);
  state.saveTimer = 0;
  writeStorage(STORAGE.conversations, JSON.stringify(state.conversations));
  writeStorage(STORAGE.current, state.currentId);
}

// Streaming changes the conversation many times a second; write it at most every 500 ms.
function scheduleSave() {
  if (!state.saveTimer) state.saveTimer = setTimeout(saveConversations, SAVE_INTERVAL_MS);
}

// ---- Conversations ------------------------------------------------------------------------

function newId() {
  // crypto.randomUUID needs a secure context; the page may be served over plain http.
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
}

function currentConversation() {
  return state.conversations.find((c) => c.id === state.currentId) || null;
}

function createConversation() {
  const now = Date.now();
  const conv = { id: newId(), title: '', created: now, updated: now, settings: { ...state.settings }, messages: [] };
  state.conversations.unshift(conv);
  state.currentId = conv.id;
  return conv;
}

function makeTitle(text) {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > TITLE_LENGTH ? `${line.slice(0, TITLE_LENGTH - 1).trimEnd()}…` : line;
}

function updateTitle(conv) {
  const first = conv.messages.find((m) => m.role === 'user');
  conv.title = first ? makeTitle(first.content) : '';
}

// Shows conversation `id` (null: a new, empty one).
function showConversation(id) {
  state.currentId = id;
  state.editing = null;
  hideError();
  saveConversations();
  closeSidebar();
  renderAll();
}

function switchConversation(id) {
  showConversation(id);
  scrollToBottom();
}

function newChat() {
  showConversation(null);
  els.prompt.focus();
}

function deleteConversation(id) {
  if (state.run && state.run.conv.id === id) stop();
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (state.currentId === id) {
    state.currentId = null;
    state.editing = null;
    hideError();
  }
  saveConversations();
  renderAll();
  // Keep keyboard users in the list rather than dropping focus on <body>.
  const next = els.conversations.querySelector('.conv-open') || els.newChat;
  next.focus();
}

// ---- API ----------------------------------------------------------------------------------

async function apiFetch(path, options = {}) {
  const headers = new Headers(options.headers);
  if (state.apiKey) headers.set('Authorization', `Bearer ${state.apiKey}`);
  try {
    return await fetch(path, { ...options, headers });
  } catch (err) {
    if (err && err.name === 'AbortError') throw err;
    throw new NetworkError(unreachableMessage());
  }
}

// An error response carries {"error":{"message":...}}; anything else is named by its status.
async function errorFromResponse(res) {
  let message = `HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`;
  try {
    const body = await res.json();
    const error = body && body.error;
    if (typeof error === 'string' && error) message = error;
    else if (error && typeof error.message === 'string' && error.message) message = error.message;
  } catch {
    // Not JSON: keep the status.
  }
  return new ApiError(message, res.status);
}

function describeError(err) {
  if (err instanceof ApiError || err instanceof NetworkError) return err.message;
  return `Unexpected error: ${err && err.message ? err.message : String(err)}`;
}

function ensureModel() {
  if (state.model) return Promise.resolve(state.model);
  if (!state.modelRequest) {
    state.modelRequest = loadModel().finally(() => { state.modelRequest = null; });
  }
  return state.modelRequest;
}

async function loadModel() {
  els.modelName.textContent = '…';
  try {
    const res = await apiFetch('/v1/models');
    if (res.status === 401) {
      els.modelName.textContent = 'API key needed';
      askForKey('models', () => ensureModel());
      return null;
    }
    if (!res.ok) throw await errorFromResponse(res);
    const body = await res.json();
    const first = body && Array.isArray(body.data) ? body.data[0] : null;
    state.model = first && typeof first.id === 'string' ? first.id : null;
    els.modelName.textContent = state.model || 'no model';
    return state.model;
  } catch (err) {
    els.modelName.textContent = 'unavailable';
    showError(describeError(err));
    return null;
  }
}

function requestMessages(conv) {
  const out = [];
  const system = state.settings.systemPrompt.trim();
  if (system) out.push({ role: 'system', content: system });
  for (const m of conv.messages) {
    // An assistant turn that produced no text (stopped early, failed) carries nothing to send.
    if (m.role === 'assistant' && !m.content) continue;
    out.push({ role: m.role, content: m.content });
  }
  return out;
}

async function postChat(messages, signal) {
  const s = state.settings;
  const body = {
    model: state.model || undefined,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: s.temperature,
    top_p: s.topP,
    max_tokens: s.maxTokens,
  };
  const res = await apiFetch('/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok) throw await errorFromResponse(res);
  return res;
}

// ---- Server-Sent Events -------------------------------------------------------------------

// Splits decoded text into SSE events. Network chunks may end anywhere, even mid-line, so the
// unfinished tail is kept for the next push.
class SseParser {
  constructor() {
    this.tail = '';
    this.data = [];
  }

  push(text) {
    const lines = (this.tail + text).split('\n');
    this.tail = lines.pop();
    const events = [];
    for (const raw of lines) {
      const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
      if (line === '') {
        // A blank line ends an event.
        if (this.data.length) events.push(this.data.join('\n'));
        this.data = [];
      } else if (line.startsWith('data:')) {
        this.data.push(line.slice(line[5] === ' ' ? 6 : 5));
      }
      // Comments (":...") and other fields (event:, id:, retry:) are not used by this API.
    }
    return events;
  }

  // The stream closed: whatever is left counts as a final event.
  finish() {
    return this.push('\n\n');
  }
}

async function readStream(res, run) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (err) {
      if (run.controller.signal.aborted) throw err;
      throw new NetworkError(`The connection to the server at ${location.origin} was lost`);
    }
    const events = chunk.done ? parser.push(decoder.decode()).concat(parser.finish())
                              : parser.push(decoder.decode(chunk.value, { stream: true }));
    for (const data of events) {
      if (data.trim() === '[DONE]') {
        reader.cancel().catch(() => {});
        return;
      }
      applyEvent(run, data);
    }
    if (chunk.done) return;
  }
}

// A server that ignored "stream": true answers with one JSON completion.
async function readJsonAnswer(res, run) {
  const body = await res.json();
  const message = body && body.choices && body.choices[0] && body.choices[0].message;
  if (message) {
    applyDelta(run, message);
    run.msg.finish = body.choices[0].finish_reason || null;
  }
  run.usage = body.usage || null;
  run.timings = body.timings || null;
}

function applyEvent(run, data) {
  let chunk;
  try {
    chunk = JSON.parse(data);
  } catch {
    return; // not JSON: nothing this page understands
  }
  if (!chunk || typeof chunk !== 'object') return;
  if (chunk.error) {
    const message = typeof chunk.error === 'string' ? chunk.error : chunk.error.message;
    throw new ApiError(message || 'The server reported an error');
  }
  for (const choice of chunk.choices || []) {
    if (choice.index) continue; // only one choice is requested
    if (choice.delta) applyDelta(run, choice.delta);
    if (choice.finish_reason) run.msg.finish = choice.finish_reason;
  }
  if (chunk.usage) run.usage = chunk.usage;
  if (chunk.timings) run.timings = chunk.timings;
}

function applyDelta(run, delta) {
  const reasoning = typeof delta.reasoning_content === 'string' ? delta.reasoning_content : '';
  const content = typeof delta.content === 'string' ? delta.content : '';
  if (!reasoning && !content) return; // e.g. the {"role":"assistant"} opener
  run.msg.reasoning = (run.msg.reasoning || '') + reasoning;
  run.msg.content += content;
  const now = performance.now();
  if (!run.firstAt) run.firstAt = now;
  run.lastAt = now;
  run.chunks += 1;
  scheduleRender();
  scheduleSave();
}

// ---- Generation ---------------------------------------------------------------------------

function send() {
  const text = els.prompt.value.trim();
  if (!text || state.run) return;
  const conv = currentConversation() || createConversation();
  conv.messages.push({ role: 'user', content: text });
  if (!conv.title) updateTitle(conv);
  els.prompt.value = '';
  autosizePrompt();
  state.editing = null;
  generate(conv);
}

async function generate(conv) {
  if (state.run) return;
  hideError();
  const history = requestMessages(conv);
  const msg = { role: 'assistant', content: '', reasoning: '', pending: true };
  conv.messages.push(msg);
  conv.settings = { ...state.settings };
  conv.updated = Date.now();
  const run = {
    conv, msg, controller: new AbortController(),
    startedAt: 0, firstAt: 0, lastAt: 0, chunks: 0, usage: null, timings: null,
  };
  // Claimed before the first await, so a second click cannot start another answer.
  state.run = run;
  saveConversations();
  renderAll();
  scrollToBottom();
  try {
    await ensureModel();
    run.startedAt = performance.now();
    const res = await postChat(history, run.controller.signal);
    const type = res.headers.get('Content-Type') || '';
    if (type.includes('application/json')) await readJsonAnswer(res, run);
    else await readStream(res, run);
  } catch (err) {
    handleRunError(run, err);
  }
  finishRun(run);
}

function handleRunError(run, err) {
  if (run.controller.signal.aborted) {
    run.msg.stopped = true;
    return;
  }
  if (err instanceof ApiError && err.status === 401) {
    dropIfEmpty(run);
    askForKey('chat', () => retryConversation(run.conv));
    return;
  }
  run.msg.error = describeError(err);
  dropIfEmpty(run);
  showError(run.msg.error);
}

// A failed answer with no text is removed; the user message stays, with a Retry button.
function dropIfEmpty(run) {
  if (run.msg.content || run.msg.reasoning) return;
  const i = run.conv.messages.indexOf(run.msg);
  if (i >= 0) run.conv.messages.splice(i, 1);
}

function finishRun(run) {
  run.msg.pending = false;
  if (run.chunks || run.timings) run.msg.stats = finalStats(run);
  const follow = isNearBottom();
  state.run = null;
  run.conv.updated = Date.now();
  saveConversations();
  renderAll();
  if (follow) scrollToBottom();
  // The Stop button just disappeared; put focus somewhere useful instead of <body>.
  if (document.activeElement === document.body || document.activeElement === els.stop) els.prompt.focus();
}

function stop() {
  if (state.run) state.run.controller.abort();
}

function regenerate(index) {
  const conv = currentConversation();
  if (!conv || state.run || index !== conv.messages.length - 1) return;
  conv.messages.splice(index, 1);
  generate(conv);
}

// Asks again for a conversation whose last user message got no answer.
function retryConversation(conv) {
  if (!state.conversations.includes(conv) || state.run) return;
  const last = conv.messages[conv.messages.length - 1];
  if (last && last.role === 'user') generate(conv);
}

function startEdit(index) {
  if (state.run) return;
  state.editing = index;
  renderConversation();
  const input = els.messages.querySelector('.editor textarea');
  if (input) {
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
  }
}

function cancelEdit() {
  const index = state.editing;
  state.editing = null;
  renderConversation();
  const button = els.messages.querySelector(`.message[data-index="${index}"] .edit`);
  if (button) button.focus();
}

function saveEdit(index, text) {
  const conv = currentConversation();
  const msg = conv && conv.messages[index];
  const value = text.trim();
  if (!msg || msg.role !== 'user' || state.run || !value) return;
  msg.content = value;
  conv.messages.length = index + 1; // everything after the edited message is dropped
  updateTitle(conv);
  state.editing = null;
  generate(conv);
}

// ---- Statistics ---------------------------------------------------------------------------

const finiteOrNull = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);

function clientTokensPerSecond(run, until) {
  const seconds = (until - run.firstAt) / 1000;
  // The first chunk starts the clock, so it is not counted in the rate.
  return run.chunks > 1 && seconds > 0 ? (run.chunks - 1) / seconds : null;
}

function finalStats(run) {
  const t = run.timings || {};
  const u = run.usage || {};
  return {
    ttft: finiteOrNull(t.ttft_ms) ?? finiteOrNull(t.prompt_ms) ?? (run.firstAt ? run.firstAt - run.startedAt : null),
    tps: finiteOrNull(t.predicted_per_second) ?? clientTokensPerSecond(run, run.lastAt),
    tokens: finiteOrNull(t.predicted_n) ?? finiteOrNull(u.completion_tokens) ?? run.chunks,
    promptTokens: finiteOrNull(t.prompt_n) ?? finiteOrNull(u.prompt_tokens),
    promptTps: finiteOrNull(t.prompt_per_second),
  };
}

function formatStats(stats) {
  if (!stats) return '';
  const parts = [];
  if (stats.ttft != null) parts.push(`TTFT ${Math.round(stats.ttft)} ms`);
  if (stats.tps != null) parts.push(`${stats.tps.toFixed(1)} tok/s`);
  if (stats.tokens != null) parts.push(`${Math.round(stats.tokens)} tokens`);
  return parts.join(' · ');
}

function statsTooltip(stats) {
  if (!stats || stats.promptTokens == null) return '';
  const speed = stats.promptTps != null ? ` at ${stats.promptTps.toFixed(1)} tok/s` : '';
  return `Prompt: ${stats.promptTokens} tokens${speed}`;
}

function liveStats(run) {
  if (!run.chunks) return 'Waiting for the first token…';
  const tps = clientTokensPerSecond(run, performance.now());
  return `${tps != null ? `${tps.toFixed(1)} tok/s · ` : ''}${run.chunks} tokens`;
}

// ---- Rendering: conversation ----------------------------------------------------------------

// Small element builder; string children become text nodes, so they are never parsed as HTML.
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (name === 'class') el.className = value;
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  el.append(...children.filter((c) => c != null && c !== false));
  return el;
}

function renderAll() {
  renderSidebar();
  renderConversation();
  updateControls();
}

function updateControls() {
  const streaming = Boolean(state.run);
  els.send.disabled = streaming;
  els.stop.hidden = !streaming;
  els.forgetKey.hidden = !state.apiKey;
  document.body.dataset.streaming = String(streaming);
}

function renderSidebar() {
  const sorted = [...state.conversations].sort((a, b) => (b.updated || 0) - (a.updated || 0));
  els.conversations.replaceChildren(...sorted.map(conversationItem));
}

function conversationItem(conv) {
  const title = conv.title || 'New conversation';
  const busy = state.run && state.run.conv === conv;
  return h('li', { class: busy ? 'conv busy' : 'conv', 'data-id': conv.id },
    h('button', {
      type: 'button', class: 'conv-open', title,
      'aria-current': conv.id === state.currentId ? 'true' : null,
    }, title),
    h('button', { type: 'button', class: 'conv-delete', 'aria-label': `Delete conversation: ${title}`, title: 'Delete' }, '×'));
}

function renderConversation() {
  const conv = currentConversation();
  const messages = conv ? conv.messages : [];
  els.messages.replaceChildren(...messages.map((m, i) => messageElement(m, i, i === messages.length - 1)));
  els.empty.hidden = messages.length > 0;
}

function messageElement(msg, index, isLast) {
  const el = h('article', { class: `message ${msg.role}`, 'data-index': index },
    h('div', { class: 'message-role' }, msg.role === 'user' ? 'You' : 'Assistant'));
  if (msg.role === 'user') appendUserParts(el, msg, index, isLast);
  else appendAssistantParts(el, msg, isLast);
  return el;
}

function appendUserParts(el, msg, index, isLast) {
  if (state.editing === index) {
    el.append(editorElement(msg));
    return;
  }
  const busy = Boolean(state.run);
  const actions = h('div', { class: 'message-actions' },
    h('button', { type: 'button', class: 'edit', disabled: busy, 'aria-label': 'Edit message' }, 'Edit'));
  // The last user message without an answer (it failed) can be asked again.
  if (isLast && !busy) actions.append(h('button', { type: 'button', class: 'retry' }, 'Retry'));
  el.append(h('div', { class: 'content' }, msg.content), actions);
}

function editorElement(msg) {
  const input = h('textarea', { class: 'edit-input', rows: 4, 'aria-label': 'Edit message' });
  input.value = msg.content;
  return h('div', { class: 'editor' }, input,
    h('div', { class: 'editor-actions' },
      h('button', { type: 'button', class: 'save primary' }, 'Save'),
      h('button', { type: 'button', class: 'cancel' }, 'Cancel')));
}

function appendAssistantParts(el, msg, isLast) {
  const streaming = Boolean(state.run && state.run.msg === msg);
  if (streaming) el.classList.add('streaming');
  if (msg.stopped) el.classList.add('stopped');
  if (msg.reasoning) el.append(reasoningElement(msg));
  const content = h('div', { class: 'content markdown' });
  content.innerHTML = renderMarkdown(msg.content); // every piece of model text is escaped inside
  const stats = h('span', { class: 'stats', title: statsTooltip(msg.stats) || null },
    streaming ? liveStats(state.run) : formatStats(msg.stats));
  const footer = h('div', { class: 'message-footer' }, stats, ...badges(msg));
  if (isLast && !state.run) {
    footer.append(h('button', { type: 'button', class: 'regenerate', 'aria-label': 'Regenerate answer' }, 'Regenerate'));
  }
  el.append(content, footer);
}

function badges(msg) {
  const out = [];
  if (msg.stopped) out.push(h('span', { class: 'badge stopped' }, 'Stopped'));
  if (msg.error) out.push(h('span', { class: 'badge warn', title: msg.error }, 'Interrupted'));
  if (msg.finish === 'length') out.push(h('span', { class: 'badge' }, 'Reached max tokens'));
  return out;
}

function reasoningElement(msg) {
  const details = h('details', { class: 'reasoning', open: state.openReasoning.has(msg) },
    h('summary', {}, 'Reasoning'),
    h('div', { class: 'reasoning-text' }, msg.reasoning));
  // Remember the fold state across re-renders; toggle does not bubble, so listen here.
  details.addEventListener('toggle', () => {
    if (details.open) state.openReasoning.add(msg);
    else state.openReasoning.delete(msg);
  });
  return details;
}

// Chunks can arrive faster than the screen refreshes; draw at most once per frame.
function scheduleRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(updateStreamingView);
}

// Updates only the streaming message, not the whole conversation.
function updateStreamingView() {
  state.renderQueued = false;
  const run = state.run;
  const el = run && els.messages.querySelector('.message.streaming');
  if (!el) return; // another conversation is on screen
  const follow = isNearBottom();
  const content = el.querySelector('.content');
  if (run.msg.reasoning) {
    const text = el.querySelector('.reasoning-text');
    if (text) text.textContent = run.msg.reasoning;
    else content.before(reasoningElement(run.msg));
  }
  if (content.dataset.shown !== String(run.msg.content.length)) {
    content.innerHTML = renderMarkdown(run.msg.content);
    content.dataset.shown = String(run.msg.content.length);
  }
  el.querySelector('.stats').textContent = liveStats(run);
  if (follow) scrollToBottom();
}

function isNearBottom() {
  const s = els.scroll;
  return s.scrollHeight - s.scrollTop - s.clientHeight < STICK_TO_BOTTOM_PX;
}

function scrollToBottom() {
  els.scroll.scrollTop = els.scroll.scrollHeight;
}

// ---- Rendering: markdown ------------------------------------------------------------------
// A small subset: fenced code, inline code, bold, italic, headings, lists, quotes, rules,
// http(s) links, paragraphs. The text is HTML-escaped before any markup is added, and the only
// tags produced are the ones written below.

const FENCE = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const RULE = /^\s{0,3}([-*_])(?:\s*\1){2,}\s*$/;
const LIST_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])(?:\s+(.*))?$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const LINK = /\[([^\]\n]+)\]\(\s*((?:[^\s()]|\([^\s()]*\))+)\s*\)/g; // [text](url), url may hold (x)
const SAFE_URL = /^https?:\/\/\S+$/i;
const SLOT = '\u0000'; // marks placeholders; stripped from the input so it cannot forge one

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

function indentOf(line) {
  let width = 0;
  for (const c of line) {
    if (c === ' ') width += 1;
    else if (c === '\t') width += 4;
    else break;
  }
  return width;
}

function stripIndent(line, width) {
  let i = 0;
  while (i < width && line[i] === ' ') i += 1;
  return line.slice(i);
}

function renderMarkdown(source) {
  const lines = source.split(SLOT).join('').replace(/\r\n?/g, '\n').split('\n');
  const out = [];
  const lists = []; // open lists, innermost last: { tag, indent }
  let paragraph = [];
  let afterBlank = false;

  const flushParagraph = () => {
    if (paragraph.length) out.push(`<p>${paragraph.map(renderInline).join('<br>')}</p>`);
    paragraph = [];
  };
  const closeListsDeeperThan = (indent) => {
    while (lists.length && lists[lists.length - 1].indent > indent) out.push(`</li></${lists.pop().tag}>`);
  };

  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (!line.trim()) {
      flushParagraph();
      afterBlank = true;
      continue;
    }
    const indent = indentOf(line);
    const top = lists[lists.length - 1];
    const fence = line.match(FENCE);
    if (fence) {
      flushParagraph();
      if (!top || indent <= top.indent) closeListsDeeperThan(-1); // an indented fence stays in its item
      i = renderFence(lines, i, fence, out);
    } else if (LIST_ITEM.test(line) && !RULE.test(line)) {
      flushParagraph();
      addListItem(line.match(LIST_ITEM), indent, lists, out);
    } else if (top && (indent > top.indent || (!afterBlank && !isBlockStart(line)))) {
      out.push(`<br>${renderInline(line.trim())}`); // continuation of the current item
    } else {
      closeListsDeeperThan(-1);
      i = renderBlock(lines, i, paragraph, flushParagraph, out);
    }
    afterBlank = false;
  }
  flushParagraph();
  closeListsDeeperThan(-1);
  return out.join('');
}

function isBlockStart(line) {
  return HEADING.test(line) || RULE.test(line) || QUOTE.test(line);
}

// Headings, rules, quotes and paragraph lines. Returns the index of the last line used.
function renderBlock(lines, i, paragraph, flushParagraph, out) {
  const line = lines[i];
  const heading = line.match(HEADING);
  if (heading) {
    flushParagraph();
    const level = Math.min(heading[1].length, 3);
    out.push(`<h${level}>${renderInline(heading[2])}</h${level}>`);
    return i;
  }
  if (RULE.test(line)) {
    flushParagraph();
    out.push('<hr>');
    return i;
  }
  if (QUOTE.test(line)) {
    flushParagraph();
    const inner = [];
    let j = i;
    for (; j < lines.length && QUOTE.test(lines[j]); j++) inner.push(lines[j].match(QUOTE)[1]);
    out.push(`<blockquote>${renderMarkdown(inner.join('\n'))}</blockquote>`);
    return j - 1;
  }
  paragraph.push(line.trim());
  return i;
}

function addListItem(match, indent, lists, out) {
  const [, , marker, text = ''] = match;
  const tag = /\d/.test(marker) ? 'ol' : 'ul';
  while (lists.length && lists[lists.length - 1].indent > indent) out.push(`</li></${lists.pop().tag}>`);
  let top = lists[lists.length - 1];
  if (top && top.indent === indent && top.tag === tag) {
    out.push('</li><li>');
  } else {
    if (top && top.indent === indent) out.push(`</li></${lists.pop().tag}>`); // the marker type changed
    const start = tag === 'ol' ? parseInt(marker, 10) : 1;
    out.push(`<${tag}${start !== 1 ? ` start="${start}"` : ''}><li>`);
    lists.push({ tag, indent });
  }
  out.push(renderInline(text));
}

// A fence left open (the answer is still streaming) runs to the end of the text.
function renderFence(lines, start, match, out) {
  const [, pad, marker, lang] = match;
  const close = new RegExp(`^\\s*${marker[0]}{${marker.length},}\\s*$`);
  const code = [];
  let i = start + 1;
  for (; i < lines.length && !close.test(lines[i]); i++) code.push(stripIndent(lines[i], pad.length));
  out.push(codeBlockHtml(code.join('\n'), lang));
  return i;
}

function codeBlockHtml(code, lang) {
  const name = /^[\w+#.-]{1,32}$/.test(lang) ? escapeHtml(lang) : '';
  return '<div class="code-block"><div class="code-head">'
    + `<span class="code-lang">${name}</span>`
    + '<button type="button" class="copy" aria-label="Copy code">Copy</button></div>'
    + `<pre><code${name ? ` class="language-${name}"` : ''}>${escapeHtml(code)}</code></pre></div>`;
}

// Inline markup on already-escaped text. Code spans and links are set aside as placeholders
// first, so emphasis markers inside them (or inside a URL) are left alone.
function renderInline(text) {
  const slots = [];
  const hold = (html) => `${SLOT}${slots.push(html) - 1}${SLOT}`;
  let s = escapeHtml(text);
  s = s.replace(/(`+)(.+?)\1(?!`)/g, (_, ticks, code) => hold(`<code>${code.replace(/^ (.+) $/, '$1')}</code>`));
  s = s.replace(LINK, (whole, label, url) => (SAFE_URL.test(url) ? hold(linkHtml(label, url)) : whole));
  const restore = (str) => str.replace(/\u0000(\d+)\u0000/g, (_, n) => restore(slots[Number(n)]));
  return restore(emphasis(s));
}

// The URL is already escaped, so it cannot leave the quoted attribute.
function linkHtml(label, url) {
  return `<a href="${url}" target="_blank" rel="noopener noreferrer">${emphasis(label)}</a>`;
}

function emphasis(s) {
  return s
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>')
    .replace(/\*(?=[^\s*])([^*]*?[^\s*])\*/g, '<em>$1</em>')
    .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>');
}

// ---- Clipboard ----------------------------------------------------------------------------

async function copyText(text) {
  // navigator.clipboard exists only in secure contexts (https, localhost).
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Permission refused: try the old way.
    }
  }
  return legacyCopy(text);
}

function legacyCopy(text) {
  const helper = h('textarea', { class: 'clipboard-helper', readonly: true, 'aria-hidden': 'true', tabindex: -1 });
  helper.value = text;
  const previous = document.activeElement;
  document.body.append(helper);
  helper.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch {
    ok = false;
  }
  helper.remove();
  if (previous && previous.focus) previous.focus();
  return ok;
}

async function copyCode(button) {
  const code = button.closest('.code-block').querySelector('code');
  const ok = await copyText(code.textContent);
  button.textContent = ok ? 'Copied' : 'Copy failed';
  setTimeout(() => { button.textContent = 'Copy'; }, 1500);
}

// ---- API key --------------------------------------------------------------------------------

function askForKey(name, retry) {
  state.afterKey.set(name, retry);
  els.keyHint.textContent = state.apiKey
    ? 'The server rejected the stored API key. Enter a valid key.'
    : 'This server requires an API key.';
  els.keyForm.hidden = false;
  scrollToBottom();
  els.keyInput.focus();
}

function submitKey() {
  const key = els.keyInput.value.trim();
  if (!key) return;
  // A header value must be printable ASCII; fetch would throw on anything else.
  if (!/^[\x21-\x7e]+$/.test(key)) {
    els.keyHint.textContent = 'The key may contain only printable ASCII characters without spaces.';
    return;
  }
  state.apiKey = key;
  writeStorage(STORAGE.apiKey, key);
  els.keyInput.value = '';
  els.keyForm.hidden = true;
  updateControls();
  const retries = [...state.afterKey.values()];
  state.afterKey.clear();
  for (const retry of retries) retry();
}

function forgetKey() {
  state.apiKey = '';
  writeStorage(STORAGE.apiKey, null);
  updateControls();
  els.settingsToggle.focus();
}

// ---- Settings -------------------------------------------------------------------------------

function clampNumber(value, min, max, fallback) {
  const n = typeof value === 'number' ? value : parseFloat(value);
  return Number.isFinite(n) ? Math.min(max, Math.max(min, n)) : fallback;
}

function showSettings() {
  const s = state.settings;
  els.systemPrompt.value = s.systemPrompt;
  els.temperature.value = String(s.temperature);
  els.topP.value = String(s.topP);
  els.maxTokens.value = String(s.maxTokens);
}

// Reads the form while the user types; invalid or empty fields fall back to the defaults.
function readSettings() {
  state.settings = {
    systemPrompt: els.systemPrompt.value,
    temperature: clampNumber(els.temperature.value, 0, 2, DEFAULT_SETTINGS.temperature),
    topP: clampNumber(els.topP.value, 0, 1, DEFAULT_SETTINGS.topP),
    maxTokens: Math.round(clampNumber(els.maxTokens.value, 1, 1e7, DEFAULT_SETTINGS.maxTokens)),
  };
  saveSettings();
}

function toggleSettings() {
  const open = els.settings.hidden;
  els.settings.hidden = !open;
  els.settingsToggle.setAttribute('aria-expanded', String(open));
  if (open) els.systemPrompt.focus();
}

// ---- Sidebar (narrow windows) -----------------------------------------------------------

function openSidebar() {
  els.app.classList.add('sidebar-open');
  els.sidebarToggle.setAttribute('aria-expanded', 'true');
  els.newChat.focus();
}

function closeSidebar() {
  if (!els.app.classList.contains('sidebar-open')) return;
  els.app.classList.remove('sidebar-open');
  els.sidebarToggle.setAttribute('aria-expanded', 'false');
  if (narrowScreen.matches && els.sidebar.contains(document.activeElement)) els.sidebarToggle.focus();
}

// ---- Prompt -----------------------------------------------------------------------------------

// Grows the textarea with its text, up to the CSS max-height.
function autosizePrompt() {
  els.prompt.style.height = 'auto';
  els.prompt.style.height = `${els.prompt.scrollHeight + 2}px`;
}

const isPlainEnter = (e) => e.key === 'Enter' && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey && !e.isComposing;

// ---- Events -------------------------------------------------------------------------------

function onMessagesClick(e) {
  const button = e.target.closest('button');
  if (!button) return;
  const item = button.closest('.message');
  const index = item ? Number(item.dataset.index) : -1;
  if (button.classList.contains('copy')) copyCode(button);
  else if (button.classList.contains('regenerate')) regenerate(index);
  else if (button.classList.contains('edit')) startEdit(index);
  else if (button.classList.contains('retry')) retryConversation(currentConversation());
  else if (button.classList.contains('save')) saveEdit(index, item.querySelector('.editor textarea').value);
  else if (button.classList.contains('cancel')) cancelEdit();
}

function onMessagesKeydown(e) {
  if (!e.target.matches('.editor textarea')) return;
  if (isPlainEnter(e)) {
    e.preventDefault();
    saveEdit(state.editing, e.target.value);
  } else if (e.key === 'Escape' && !state.run) {
    e.stopPropagation();
    cancelEdit();
  }
}

function onConversationsClick(e) {
  const button = e.target.closest('button');
  const item = button && button.closest('.conv');
  if (!item) return;
  if (button.classList.contains('conv-delete')) deleteConversation(item.dataset.id);
  else switchConversation(item.dataset.id);
}

function onDocumentKeydown(e) {
  if (e.key !== 'Escape') return;
  if (state.run) {
    e.preventDefault();
    stop();
  } else if (els.app.classList.contains('sidebar-open')) {
    closeSidebar();
  }
}

// Leaving the page ends a running answer; what arrived so far is kept, marked as stopped.
// Otherwise only a throttled save still pending is written (so clearing storage then reloading
// really starts afresh).
function onPageHide() {
  if (state.run) {
    state.run.msg.stopped = true;
    state.run.msg.pending = false;
    saveConversations();
    stop();
  } else if (state.saveTimer) {
    saveConversations();
  }
}

function bindEvents() {
  els.composer.addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  els.prompt.addEventListener('keydown', (e) => {
    if (!isPlainEnter(e)) return;
    e.preventDefault();
    send();
  });
  els.prompt.addEventListener('input', autosizePrompt);
  els.stop.addEventListener('click', stop);
  els.newChat.addEventListener('click', newChat);
  els.conversations.addEventListener('click', onConversationsClick);
  els.messages.addEventListener('click', onMessagesClick);
  els.messages.addEventListener('keydown', onMessagesKeydown);
  els.settingsToggle.addEventListener('click', toggleSettings);
  els.settings.addEventListener('input', readSettings);
  els.settings.addEventListener('change', showSettings); // show the value actually used
  els.resetSettings.addEventListener('click', () => {
    state.settings = { ...DEFAULT_SETTINGS };
    saveSettings();
    showSettings();
  });
  els.forgetKey.addEventListener('click', forgetKey);
  els.keyForm.addEventListener('submit', (e) => {
    e.preventDefault();
    submitKey();
  });
  els.sidebarToggle.addEventListener('click', () => {
    if (els.app.classList.contains('sidebar-open')) closeSidebar();
    else openSidebar();
  });
  els.backdrop.addEventListener('click', closeSidebar);
  narrowScreen.addEventListener('change', closeSidebar);
  document.addEventListener('keydown', onDocumentKeydown);
  window.addEventListener('pagehide', onPageHide);
}

// ---- Start --------------------------------------------------------------------------------

function init() {
  state.apiKey = readStorage(STORAGE.apiKey) || '';
  loadSettings();
  loadConversations();
  showSettings();
  bindEvents();
  renderAll();
  scrollToBottom();
  autosizePrompt();
  ensureModel();
  // On phones, focusing would pop up the keyboard over the conversation.
  if (!narrowScreen.matches) els.prompt.focus();
}

init();
