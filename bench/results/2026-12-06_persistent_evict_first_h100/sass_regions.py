import csv,gzip,sys
rows=list(csv.reader(gzip.open(sys.argv[1],'rt',errors='replace')))
h=rows[1]; data=rows[2:]
ix={k:h.index(k) for k in h}
def num(r,k):
    v=r[ix[k]].replace(',','')
    try: return float(v)
    except: return 0.0
stalls=[k for k in h if k.startswith('stall_') and 'Not Issued' not in k]
recs=[]
for r in data:
    if len(r)!=len(h): continue
    recs.append(dict(a=int(r[ix['Address']],16), s=r[ix['Source']].strip(), n=num(r,'Warp Stall Sampling (All Samples)'), ex=num(r,'Instructions Executed'), st={k:num(r,k) for k in stalls}))
base=recs[0]['a']
for x in recs: x['a']-=base
tot=sum(x['n'] for x in recs)
print("instrs",len(recs),"KB",len(recs)*16//1024,"hot KB",sum(1 for x in recs if x['ex']>0)*16//1024,"samples",tot)
bounds=[0]+[x['a']+16 for x in recs if x['s'].startswith('RET')]+[len(recs)*16]
agg={k:sum(x['st'][k] for x in recs) for k in stalls}
print("overall stalls:", ", ".join(f"{k[6:]} {100*v/tot:.1f}%" for k,v in sorted(agg.items(),key=lambda t:-t[1])[:8]))
for a,b in zip(bounds,bounds[1:]):
    seg=[x for x in recs if a<=x['a']<b]
    if not seg: continue
    hot=sum(1 for x in seg if x['ex']>0); s=sum(x['n'] for x in seg)
    if hot==0: continue
    st={k:sum(x['st'][k] for x in seg) for k in stalls}
    top=", ".join(f"{k[6:]} {100*v/max(s,1):.0f}%" for k,v in sorted(st.items(),key=lambda t:-t[1])[:4])
    print(f"{a:#8x}-{b:#8x} size {(b-a)/1024:6.1f}KB hot {hot*16/1024:5.1f}KB samples {100*s/tot:5.1f}% maxexec {max(x['ex'] for x in seg):9.0f} | {top}")
