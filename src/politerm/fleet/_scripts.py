"""The queue's Lua scripts: every change of a work's state is one atomic script.

Redis runs a script alone, so "is this epoch still the work's newest?" and the change that
depends on the answer can never be split by another node's claim. Times are Redis's own
clock (``TIME``), in milliseconds: the nodes' clocks never decide whether a lease expired.

A work's record (``w:ID``, a hash) is named from the id inside a script; every key of a
project shares one Cluster hash tag (:mod:`politerm.fleet.keys`), so that stays on one slot.
"""

from __future__ import annotations

import typing as t

_NOW: t.Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

SUBMIT: t.Final = (
    _NOW
    + """
-- KEYS: work record, work stream, agents set, router role
-- ARGV: group, id, agent, kind, payload, router token ('': not posted by a router)
local w, stream = KEYS[1], KEYS[2]
if ARGV[6] ~= '' then
  -- A router posts only while it holds the role with this token, on Redis's clock.
  local r = redis.call('HMGET', KEYS[4], 'holder', 'token', 'expires')
  if r[2] ~= ARGV[6] or tonumber(r[3] or '0') <= now then
    return {'fenced', r[1] or '', r[2] or '0'}
  end
end
local v = redis.call('HMGET', w, 'state', 'agent')
if v[1] then return {'exists', v[1], v[2]} end
-- The group exists before the first entry, so the entry is delivered from '0'.
if redis.call('EXISTS', stream) == 0 then
  redis.call('XGROUP', 'CREATE', stream, ARGV[1], '0', 'MKSTREAM')
end
local entry = redis.call('XADD', stream, '*', 'id', ARGV[2])
redis.call('HSET', w, 'id', ARGV[2], 'agent', ARGV[3], 'kind', ARGV[4], 'payload', ARGV[5],
  'state', 'queued', 'attempt', 0, 'epoch', 0, 'node', '', 'expires', 0, 'entry', entry,
  'submitted', now, 'late', 0, 'error', '')
redis.call('SADD', KEYS[3], ARGV[3])
return {'new', entry}
"""
)

CLAIM: t.Final = (
    _NOW
    + """
-- KEYS: epochs counter, leased zset, results stream, dead stream, then the work streams
-- ARGV: group, node, lease ms, max attempts, keep ms, maxlen, key prefix, mode, entry, id
-- mode 'new': start entry ARGV[9] (work ARGV[10]) of stream KEYS[5], which a blocking
-- XREADGROUP just handed this node.
-- mode 'any': first an entry of any of the streams whose attempt is not live (its lease
-- expired, or it was handed to a node that never started it and has been idle a lease),
-- else a new entry (XREADGROUP without BLOCK): one round trip when work is there.
local epochs, leased, results, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, node = ARGV[1], ARGV[2]
local lease_ms, max_attempts = tonumber(ARGV[3]), tonumber(ARGV[4])
local keep_ms, maxlen, prefix = tonumber(ARGV[5]), ARGV[6], ARGV[7]

local function drop(stream, entry)
  redis.call('XACK', stream, group, entry)
  redis.call('XDEL', stream, entry)
end

local function work_of(stream, entry)
  local rows = redis.call('XRANGE', stream, entry, entry)
  if #rows == 0 then return nil end
  local f = rows[1][2]
  for i = 1, #f, 2 do
    if f[i] == 'id' then return f[i + 1] end
  end
  return nil
end

local function start(stream, entry, id, owner, idle)
  local w = prefix .. 'w:' .. id
  local v = redis.call('HMGET', w, 'state', 'expires', 'agent', 'error', 'epoch', 'node')
  local state = v[1]
  if not state or state == 'done' or state == 'dead' then
    drop(stream, entry)
    return nil
  end
  if state == 'leased' then
    if tonumber(v[2]) > now then return nil end
  elseif owner ~= node and idle < lease_ms then
    return nil
  end
  local attempt = redis.call('HINCRBY', w, 'attempt', 1)
  if attempt > max_attempts then
    attempt = attempt - 1
    local why = 'used up its ' .. max_attempts .. ' attempts'
    if v[4] and v[4] ~= '' then why = why .. ' (last: ' .. v[4] .. ')' end
    redis.call('HSET', w, 'attempt', attempt, 'state', 'dead', 'ended', now, 'error', why,
      'expires', 0)
    redis.call('XADD', dead, 'MAXLEN', '~', maxlen, '*', 'id', id, 'agent', v[3],
      'attempts', attempt, 'error', why, 'at', now)
    redis.call('XADD', results, 'MAXLEN', '~', maxlen, '*', 'id', id, 'agent', v[3],
      'state', 'dead', 'epoch', v[5], 'node', v[6], 'attempt', attempt, 'outcome',
      cjson.encode({error = why}))
    redis.call('ZREM', leased, id)
    redis.call('PEXPIRE', w, keep_ms)
    drop(stream, entry)
    return nil
  end
  -- Out of the budget's pause (if it was paused): it is being started again.
  if state == 'paused' then redis.call('HDEL', prefix .. 'paused', id) end
  local epoch = redis.call('INCR', epochs)
  -- Claiming also resets the entry's idle time: renewals keep it below a lease.
  redis.call('XCLAIM', stream, group, node, 0, entry, 'JUSTID')
  local expires = now + lease_ms
  redis.call('HSET', w, 'state', 'leased', 'node', node, 'epoch', epoch, 'expires', expires,
    'started', now, 'paused', '')
  redis.call('ZADD', leased, expires, id)
  local p = redis.call('HMGET', w, 'kind', 'payload')
  return {'leased', id, entry, epoch, expires, attempt, p[1], p[2], v[3]}
end

if ARGV[8] == 'new' then
  local stream, entry = KEYS[5], ARGV[9]
  local p = redis.call('XPENDING', stream, group, entry, entry, 1)
  if #p == 0 then return nil end
  return start(stream, entry, ARGV[10], p[1][2], tonumber(p[1][3]))
end
for s = 5, #KEYS do
  local stream = KEYS[s]
  -- Not XAUTOCLAIM: it would move an entry before we know whether its lease has expired.
  -- The idle filter only narrows the scan; the record's expiry decides.
  local pending = redis.pcall('XPENDING', stream, group, 'IDLE', lease_ms, '-', '+', 32)
  if pending.err then
    -- No stream or group yet: a node may ask before any work was submitted, or after
    -- Redis lost its data. (Every stream is looked at here before any is read below.)
    redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
    pending = {}
  end
  for _, p in ipairs(pending) do
    local entry = p[1]
    local id = work_of(stream, entry)
    if not id then
      redis.call('XACK', stream, group, entry)
    else
      local got = start(stream, entry, id, p[2], tonumber(p[3]))
      if got then return got end
    end
  end
end
for s = 5, #KEYS do
  local stream = KEYS[s]
  -- A bounded number of reads: entries of ended work are dropped on the way.
  for _ = 1, 16 do
    local got = redis.call('XREADGROUP', 'GROUP', group, node, 'COUNT', 1, 'STREAMS', stream, '>')
    if not got then break end
    local entry = got[1][2][1]
    local f = entry[2]
    local id = nil
    for i = 1, #f, 2 do
      if f[i] == 'id' then id = f[i + 1] end
    end
    if id then
      local started = start(stream, entry[1], id, node, 0)
      if started then return started end
    else
      drop(stream, entry[1])
    end
  end
end
-- Nothing to start: when does the next lease of the project run out (ms from now, -1: none)?
local soonest = redis.call('ZRANGE', leased, 0, 0, 'WITHSCORES')
if #soonest == 0 then return {'none', -1} end
return {'none', math.max(0, tonumber(soonest[2]) - now)}
"""
)

RENEW: t.Final = (
    _NOW
    + """
-- KEYS: work stream, work record, leased zset; ARGV: group, node, entry, epoch, lease ms, id
local v = redis.call('HMGET', KEYS[2], 'state', 'epoch', 'node')
if v[1] ~= 'leased' or tonumber(v[2]) ~= tonumber(ARGV[4]) then
  return {'fenced', v[1] or 'gone', v[2] or '0', v[3] or ''}
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
local expires = now + tonumber(ARGV[5])
redis.call('HSET', KEYS[2], 'expires', expires)
redis.call('ZADD', KEYS[3], expires, ARGV[6])
return {'ok', expires, now}
"""
)

COMPLETE: t.Final = (
    _NOW
    + """
-- KEYS: work stream, work record, leased zset, results stream, late stream
-- ARGV: group, node, entry, epoch, outcome, keep ms, maxlen, id, agent, attempt
local stream, w = KEYS[1], KEYS[2]
local epoch = tonumber(ARGV[4])
local v = redis.call('HMGET', w, 'state', 'epoch', 'node', 'result_epoch')
if v[1] == 'done' and tonumber(v[4]) == epoch then return {'accepted', 'again'} end
if v[1] == 'leased' and tonumber(v[2]) == epoch then
  redis.call('HSET', w, 'state', 'done', 'outcome', ARGV[5], 'ended', now,
    'result_epoch', epoch, 'expires', 0)
  local r = redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[7], '*', 'id', ARGV[8],
    'agent', ARGV[9], 'state', 'done', 'epoch', epoch, 'node', ARGV[2],
    'attempt', ARGV[10], 'outcome', ARGV[5])
  redis.call('XACK', stream, ARGV[1], ARGV[3])
  redis.call('XDEL', stream, ARGV[3])
  redis.call('ZREM', KEYS[3], ARGV[8])
  redis.call('PEXPIRE', w, tonumber(ARGV[6]))
  return {'accepted', r}
end
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[7], '*', 'id', ARGV[8], 'agent', ARGV[9],
  'epoch', epoch, 'node', ARGV[2], 'attempt', ARGV[10], 'current', v[2] or '0',
  'state', v[1] or 'gone', 'holder', v[3] or '', 'outcome', ARGV[5], 'at', now)
if v[1] then redis.call('HINCRBY', w, 'late', 1) end
return {'rejected', v[1] or 'gone', v[2] or '0', v[3] or ''}
"""
)

GIVE_BACK: t.Final = (
    _NOW
    + """
-- KEYS: work stream, work record, leased zset
-- ARGV: group, node, entry, epoch, error, id, idle ms
local v = redis.call('HMGET', KEYS[2], 'state', 'epoch', 'node')
if v[1] ~= 'leased' or tonumber(v[2]) ~= tonumber(ARGV[4]) then
  return {'fenced', v[1] or 'gone', v[2] or '0', v[3] or ''}
end
redis.call('HSET', KEYS[2], 'state', 'queued', 'expires', 0, 'error', ARGV[5])
redis.call('ZREM', KEYS[3], ARGV[6])
-- Old as a lease: the next claim of any node takes it (as a new attempt).
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[7], 'JUSTID')
return {'ok'}
"""
)

PARK: t.Final = (
    _NOW
    + """
-- KEYS: work stream, work record, leased zset, paused hash, results stream
-- ARGV: group, node, entry, epoch, reason, id, idle ms, maxlen, agent
-- The attempt is undone (a budget cap stopped it before anything was typed): the work waits,
-- queued, for any node of its agent to start it again once the cap allows.
local v = redis.call('HMGET', KEYS[2], 'state', 'epoch', 'node')
if v[1] ~= 'leased' or tonumber(v[2]) ~= tonumber(ARGV[4]) then
  return {'fenced', v[1] or 'gone', v[2] or '0', v[3] or ''}
end
redis.call('HINCRBY', KEYS[2], 'attempt', -1)
redis.call('HSET', KEYS[2], 'state', 'paused', 'expires', 0, 'paused', ARGV[5])
redis.call('ZREM', KEYS[3], ARGV[6])
redis.call('HSET', KEYS[4], ARGV[6], cjson.encode({agent = ARGV[9], node = ARGV[2],
  reason = ARGV[5], at = now}))
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[7], 'JUSTID')
-- Whoever waits for its result looks again (and finds it paused).
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[8], '*', 'id', ARGV[6], 'agent', ARGV[9],
  'state', 'paused', 'node', ARGV[2])
return {'ok'}
"""
)

ROUTER: t.Final = (
    _NOW
    + """
-- KEYS: router role hash, token counter, standby hash
-- ARGV: mode (take, renew, release), holder, lease ms, token (renew, release), seat
-- A holder is SEAT#PID; the seat (node and session) is one router at a time on its machine
-- (a local lock), so a router of the same seat takes over a live lease at once: the one
-- before it there is gone.
local v = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires')
local holder, token, expires = v[1], v[2] or '0', tonumber(v[3] or '0')
local mode, me, lease_ms, seat = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[5] .. '#'
if mode == 'take' then
  local same_seat = holder and string.sub(holder, 1, #seat) == seat
  if holder and holder ~= me and expires > now and not same_seat then
    redis.call('HSET', KEYS[3], me, now)
    redis.call('PEXPIRE', KEYS[3], 86400000)
    return {'held', holder, token}
  end
  -- Free, expired, or ours already: a new holder draws a new token (it fences the old).
  if holder ~= me then
    token = redis.call('INCR', KEYS[2])
    redis.call('HSET', KEYS[1], 'since', now)
  end
  redis.call('HSET', KEYS[1], 'holder', me, 'token', token, 'expires', now + lease_ms)
  redis.call('HDEL', KEYS[3], me)
  return {'ok', token, now + lease_ms}
end
if holder ~= me or token ~= ARGV[4] then return {'fenced', holder or '', token} end
if mode == 'release' then
  redis.call('DEL', KEYS[1])
  return {'ok', token, now}
end
-- A renewal: also of a lease that ran out while nobody took it.
redis.call('HSET', KEYS[1], 'expires', now + lease_ms)
return {'ok', token, now + lease_ms}
"""
)

HEARTBEAT: t.Final = (
    _NOW
    + """
-- KEYS: node record, nodes set; ARGV: name, agents (JSON), load, every ms, keep ms
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'beat', now, 'agents', ARGV[2], 'load', ARGV[3],
  'every', ARGV[4])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
redis.call('SADD', KEYS[2], ARGV[1])
return now
"""
)

BOARD: t.Final = (
    _NOW
    + """
-- KEYS: board hash, board log stream, the publisher's beat, the tasks' questions hash
-- ARGV: node, keep ms, maxlen, beat ms, most rows a log entry carries, the count of rows,
-- full (1: the questions given are all the publisher has open), the publisher
-- (NODE:ROLE); then triples of field, state, row (JSON without its times: 'at' and 'since'
-- are set here, by Redis's clock; 'since' is kept while the state stays the one published
-- before); then pairs of question field, question (JSON; '': answered or ended).
local fields, entry = {}, {}
local count = tonumber(ARGV[6])
local inline = count <= tonumber(ARGV[5])
local asks_at = 9 + 3 * count
for i = 9, asks_at - 1, 3 do
  local since = now
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  if old then
    local ok, was = pcall(cjson.decode, old)
    if ok and type(was) == 'table' and was.state == ARGV[i + 1] and tonumber(was.since) then
      since = tonumber(was.since)
    end
  end
  local row = '{"at":' .. now .. ',"since":' .. since .. ',' .. string.sub(ARGV[i + 2], 2)
  redis.call('HSET', KEYS[1], ARGV[i], row)
  fields[#fields + 1] = ARGV[i]
  -- A few rows ride on the log entry itself: followers need not read them back.
  if inline then
    entry[#entry + 1] = 'row:' .. ARGV[i]
    entry[#entry + 1] = row
  end
end
-- The tasks' questions: the log names each with a '?' before (followers read them all).
local given, asked = {}, 0
for i = asks_at, #ARGV, 2 do
  given[ARGV[i]] = true
  if ARGV[i + 1] == '' then
    if redis.call('HDEL', KEYS[4], ARGV[i]) == 1 then fields[#fields + 1] = '?' .. ARGV[i] end
  else
    redis.call('HSET', KEYS[4], ARGV[i], '{"at":' .. now .. ',' .. string.sub(ARGV[i + 1], 2))
    fields[#fields + 1] = '?' .. ARGV[i]
    asked = asked + 1
  end
end
if ARGV[7] == '1' then
  -- All of this publisher's open questions were given: any other of its was answered or
  -- ended (while it was away, or before it restarted).
  local all = redis.call('HGETALL', KEYS[4])
  for j = 1, #all, 2 do
    if not given[all[j]] then
      local ok, was = pcall(cjson.decode, all[j + 1])
      if ok and type(was) == 'table' and was.by == ARGV[8] then
        redis.call('HDEL', KEYS[4], all[j])
        fields[#fields + 1] = '?' .. all[j]
      end
    end
  end
end
if asked > 0 then
  local keep = tonumber(ARGV[2])
  if redis.call('PTTL', KEYS[4]) < keep - math.min(60000, keep / 2) then
    redis.call('PEXPIRE', KEYS[4], keep)
  end
end
if #fields > 0 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'node', ARGV[1],
    'fields', table.concat(fields, ' '), unpack(entry))
  -- Both expire after keep without a change; pushed back once a minute, not every change.
  local keep = tonumber(ARGV[2])
  if redis.call('PTTL', KEYS[1]) < keep - math.min(60000, keep / 2) then
    redis.call('PEXPIRE', KEYS[1], keep)
    redis.call('PEXPIRE', KEYS[2], keep)
  end
end
-- The publisher is alive while this key is: its rows read as lost once it expires.
redis.call('SET', KEYS[3], now, 'PX', tonumber(ARGV[4]))
return now
"""
)
