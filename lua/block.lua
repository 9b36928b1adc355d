-- Arrival numbers in blocks (docs/line.md): a web process takes `count` numbers of
-- the line at once, and hands them out itself, in order, for at most the block's
-- time (queue_app/arrivals.py); a new person then costs Redis nothing of their own.
-- The numbers are issued here, as lua/join.lua issues one: `seq` moves on by the
-- block, and the random bytes of every number's token (made by the process, which
-- signs the tokens) are written with it, so that a Redis restored from an older
-- snapshot never takes a token of the block for the place of a number issued again.
--
-- Only a plain event's joins come in blocks: mode queue, no account, address cap,
-- proof of work, presale, priority lane or pre-queue to be drawn, nor CLOSED. Any
-- other asks its joins one at a time (lua/join.lua), which knows what each needs:
-- then the answer is {'JOIN'} and nothing is written.
--
-- A block is written to `blocks` until it is given back: the tick admits nobody from
-- an open block on (lua/admit.lua), so that no number is admitted before it is
-- handed out. The process gives a block back once its time is over (with its next
-- block, or alone: `count` 0), saying how many numbers it handed out: the others
-- become holes, as if their people had left (in `left`, `holes` and the leavers'
-- log, which the processes' copies of the line read), or, when nobody took a number
-- after them, are simply not issued (`seq` moves back). A block whose process never
-- gave it back (killed) is open until `until`; the tick then passes it, and its
-- numbers count as places.
--
-- KEY meta        HASH    status, gen, mode, requireAccount, maxPerAddress, proofOfWork,
--                         draw, presaleUntil, priorityShare, hasLane
-- KEY seq         STRING  last arrival number issued
-- KEY nonces      STRING  the random bytes of each number's token, 2 bytes a number
-- KEY blocks      ZSET    the blocks out: member "first:last:until" (until: Redis ms)
--                         scored by first
-- KEY popped      STRING  places already taken off the head of the line
-- KEY left        STRING  bitmap of the places whose person left
-- KEY leftlog     STRING  5 bytes per leaver (lua/leave.lua)
-- KEY holes       STRING  how many places after `popped` were left
-- ARG count   how many numbers to take (0: only give one back)
-- ARG random  the random bytes of the block's tokens, 2 per number, the top bit of
--             each pair's first clear (the general line's: queue_app/tokens.py)
-- ARG open_ms  how long the block stays open unless given back (ms)
-- ARG back    the block given back, as `blocks` holds it, or ''
-- ARG used    how many of its numbers were handed out
--
-- Returns {'BLOCK', first, now (Redis ms), gen (4 hex digits), member}, or {'JOIN'},
-- or {'BACK'} when only giving back.
-- Validates every key before its first write (Redis keeps the writes done before an
-- error): a bad key fails the script with nothing changed.
-- needs: line

local n = tonumber(count)
if not n or n < 0 or n ~= math.floor(n) or #random ~= n * 2 then error('count and random bytes do not match') end

-- 1. Read and validate; nothing is written before step 2.
local last = counter(seq)
local issued_last = last
-- The block given back: its numbers not handed out (from..to), and whether they
-- become holes or are simply not issued (nobody took a number after them).
local from, to, punch
if back ~= '' then
  local first, block_last = back:match('^(%d+):(%d+):%d+$')
  if not first then error('a block given back is first:last:until') end
  -- Not there: given back before, passed by the tick as lost, or forgotten by a
  -- Redis restored from an older snapshot (its numbers may be someone else's now).
  if redis.call('ZSCORE', blocks, back) then
    from, to = tonumber(first) + tonumber(used), tonumber(block_last)
    if from <= to and last == to then
      last = from - 1
    elseif from <= to then
      from = math.max(from, counter(popped) + 1)  -- a pass-through may have admitted them
      punch = from <= to
      if punch then
        counter(holes)
        redis.call('STRLEN', left)
        redis.call('STRLEN', leftlog)
      end
    end
  end
end
local f, now
if n > 0 then
  f = redis.call('HMGET', meta, 'status', 'gen', 'mode', 'requireAccount', 'maxPerAddress', 'proofOfWork',
    'draw', 'presaleUntil', 'priorityShare', 'hasLane')
  now = now_ms()
  if not f[1] or f[1] == 'CLOSED' or (f[3] and f[3] ~= 'queue') or f[4] == '1'
      or (tonumber(f[5] or 0) or 1) > 0 or (tonumber(f[6] or 0) or 1) > 0
      or (f[7] and f[7] ~= 'DONE') or (tonumber(f[8] or 0) or now) > now
      or (tonumber(f[9] or 0) or 1) > 0 or f[10] == '1' then
    n = -1  -- not plain: only the block given back
  else
    generation(f[2])
    if last + n > 1099511627775 then error(seq .. ' would pass the numbers a token can carry') end
  end
end

-- 2. Write: the new block's random bytes first (a `nonces` of the wrong type fails
-- here, before anything else is written).
if n > 0 then redis.call('SETRANGE', nonces, last * 2, random) end
if from then redis.call('ZREM', blocks, back) end
if punch then
  -- Whole bytes at once (nobody held these numbers: no bit of theirs is set), the
  -- edges bit by bit, in one command.
  local a, b = math.ceil(from / 8), math.floor((to + 1) / 8) - 1
  local edges = {}
  local function edge(p)
    edges[#edges + 1], edges[#edges + 2], edges[#edges + 3], edges[#edges + 4] = 'SET', 'u1', p, 1
  end
  if a > b then
    for p = from, to do edge(p) end
  else
    for p = from, a * 8 - 1 do edge(p) end
    for p = (b + 1) * 8, to do edge(p) end
    redis.call('SETRANGE', left, a, string.rep('\255', b - a + 1))
  end
  if #edges > 0 then redis.call('BITFIELD', left, unpack(edges)) end
  local log = {}
  for p = from, to do
    log[#log + 1] = log_entry(p)
  end
  redis.call('APPEND', leftlog, table.concat(log))
  redis.call('INCRBY', holes, to - from + 1)
end
if n <= 0 then
  if last ~= issued_last then redis.call('SET', seq, last) end
  return {n == 0 and 'BACK' or 'JOIN'}
end
local member = (last + 1) .. ':' .. (last + n) .. ':' .. (now + tonumber(open_ms))
redis.call('ZADD', blocks, last + 1, member)
redis.call('SET', seq, last + n)
return {'BLOCK', last + 1, now, f[2], member}
