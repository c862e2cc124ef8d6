"""Generate the labelled search evaluation set (deterministic; run to regenerate the JSONL files).

    .venv/bin/python tests/data/make_search_eval.py

Writes search_eval_memories.jsonl (300 memories, mixed Chinese and English) and
search_eval_queries.jsonl (labelled queries with the expected memory titles and a
category). Anchors are hand-written facts with one query each; fillers are
template memories that share vocabulary with the anchors, so they act as
distractors rather than noise.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent

# (title, body, tags, query, category). Categories: en, zh2 (2-character Chinese word),
# split (Jieba splits the word differently in the document), mixed, phrase, title.
ANCHORS: list[tuple[str, str, list[str], str, str]] = [
    (
        "Ana's coffee order",
        "Ana takes her coffee black with no sugar, and only after lunch.",
        ["people"],
        "how does Ana take her coffee?",
        "en",
    ),
    (
        "Bo's allergy",
        "Bo is allergic to peanuts; always check the sauce at Thai restaurants.",
        ["health"],
        "Bo peanut allergy",
        "en",
    ),
    (
        "Router admin note",
        "The home router lives behind the bookshelf; firmware updates happen on the first Sunday.",
        ["home"],
        "router firmware",
        "en",
    ),
    (
        "Passport renewal",
        "My passport expires in March 2027; renewal takes about six weeks at the consulate.",
        ["admin"],
        "when does my passport expire",
        "en",
    ),
    (
        "Marathon training plan",
        "Week 12: long run 28 km on Saturday, intervals on Tuesday, rest on Friday.",
        ["sport"],
        "marathon long run saturday",
        "en",
    ),
    (
        "Sourdough starter",
        "Feed the sourdough starter with equal weights of rye flour and water every twelve hours.",
        ["cooking"],
        "sourdough feeding ratio",
        "en",
    ),
    (
        "Dentist appointment",
        "Dr. Okafor moved the cleaning to the 14th at 9:30; bring the insurance card.",
        ["health"],
        "dentist Okafor",
        "en",
    ),
    (
        "Car tyre pressure",
        "Front tyres 2.4 bar, rear 2.2 bar; the spare is under the boot floor.",
        ["car"],
        "tyre pressure rear",
        "en",
    ),
    (
        "Garden tomatoes",
        "The cherry tomatoes on the balcony need water twice a day in July heat.",
        ["garden"],
        "balcony tomatoes water",
        "en",
    ),
    (
        "Piano lessons",
        "Mia's piano teacher prefers Chopin nocturnes before scales on Thursdays.",
        ["family"],
        "Mia piano teacher Chopin",
        "en",
    ),
    (
        "Tax deadline",
        "The freelance tax return is due on 31 July; receipts are in the blue folder.",
        ["admin"],
        "freelance tax return receipts",
        "en",
    ),
    (
        "Wi-Fi for guests",
        "The guest network is called Lighthouse and is isolated from the printer.",
        ["home"],
        "guest wifi network name",
        "en",
    ),
    (
        "Kyoto trip",
        "Temples at dawn, a tea ceremony in Uji, and the moss garden that needs a postcard booking.",
        ["travel"],
        "Kyoto",
        "title",
    ),
    (
        "Travel diary: Osaka",
        "Street food in Dotonbori; a day trip to Kyoto was too rushed to enjoy the temples.",
        ["travel"],
        "Osaka street food",
        "en",
    ),
    (
        "Database migration",
        "Postgres 16 upgrade: dump with pg_dump, restore into the new cluster, then vacuum.",
        ["work"],
        "database migration",
        "title",
    ),
    (
        "Weekly standup",
        "We discussed the database migration timeline and the flaky integration tests.",
        ["work"],
        "flaky integration tests standup",
        "en",
    ),
    (
        "Encryption at rest",
        "Every record is sealed with XChaCha20-Poly1305 before it touches the disk.",
        ["security"],
        "encryption",
        "title",
    ),
    (
        "Security review notes",
        "The reviewer asked whether encryption keys are wiped on lock and whether logs hold ids.",
        ["security"],
        "keys wiped on lock review",
        "en",
    ),
    (
        "Black coffee beans",
        "The roaster on Elm Street sells a washed Ethiopian that tastes good as black coffee.",
        ["shopping"],
        '"black coffee"',
        "phrase",
    ),
    (
        "Morning routine",
        "Coffee first, then a black notebook for the plan of the day; no phone until nine.",
        ["habits"],
        '"black notebook"',
        "phrase",
    ),
    (
        "Quote from grandpa",
        "He always said: measure twice, cut once, and never lend your good saw.",
        ["family"],
        '"measure twice, cut once"',
        "phrase",
    ),
    (
        "Incident postmortem",
        "Root cause: a missing index made the nightly report scan the whole table.",
        ["work"],
        '"missing index"',
        "phrase",
    ),
    (
        "Bike repair",
        "The rear derailleur needs a new cable; the shop on Canal Road does it same day.",
        ["bike"],
        '"rear derailleur"',
        "phrase",
    ),
    # Chinese, two-character words
    ("李娜的咖啡", "李娜喝咖啡不加糖，只在下午喝一杯。", ["朋友"], "咖啡", "zh2"),
    ("数据备份", "每周日晚上把照片备份到移动硬盘，再同步一份到另一台电脑。", ["家庭"], "备份", "zh2"),
    ("护照续签", "护照明年三月到期，续签需要提前两个月预约。", ["证件"], "护照", "zh2"),
    ("钢琴课安排", "女儿的钢琴课改到每周四下午五点。", ["孩子"], "钢琴", "zh2"),
    ("医生叮嘱", "医生说每天要散步半小时，少吃咸的。", ["健康"], "散步", "zh2"),
    ("密钥轮换", "服务器的密钥每九十天轮换一次，旧密钥保留一周。", ["工作"], "密钥", "zh2"),
    ("搬家清单", "搬家前要退掉宽带，改好快递地址，提前订搬家公司。", ["生活"], "宽带", "zh2"),
    ("王芳的生日", "王芳的生日是十月八日，她喜欢桂花糕。", ["朋友"], "桂花糕", "zh2"),
    ("阳台花园", "阳台上的茉莉花夏天每天浇水，冬天搬进室内。", ["园艺"], "茉莉", "zh2"),
    ("年度体检", "体检报告显示血压偏高，三个月后复查。", ["健康"], "血压", "zh2"),
    ("读书笔记", "《三体》里的黑暗森林法则，让我重新思考沟通的成本。", ["阅读"], "三体", "zh2"),
    ("周末徒步", "周六去香山徒步，路线从东门上山，西门下山。", ["运动"], "徒步", "zh2"),
    # Chinese, context-split words (the document's segmentation differs from the query's)
    ("长期记忆的来源", "我们的记忆库来自于长期积累，每条笔记都带时间。", ["设计"], "记忆库", "split"),
    ("演出安排", "周五晚上去北京大学生活动中心看话剧演出。", ["活动"], "北京大学", "split"),
    ("出差报销", "报销单据已交财务部门，下周到账。", ["工作"], "财务部", "split"),
    ("南京游记", "南京市长江大桥很壮观，晚上灯光更好看。", ["旅行"], "长江", "split"),
    ("家长会", "听说小孩子最近作业太多，家长会上要提一下。", ["家庭"], "孩子 作业", "split"),
    ("笔记系统", "他在记忆库中找到了三年前的会议纪要。", ["工具"], "记忆库 会议纪要", "split"),
    ("年夜饭菜单", "年夜饭有红烧鱼、饺子和八宝饭，外婆掌勺。", ["家庭"], "红烧鱼", "zh2"),
    ("装修预算", "厨房装修预算两万，橱柜占一半。", ["家"], "橱柜", "zh2"),
    # Mixed Chinese and English
    ("长期记忆 encryption design", "长期记忆必须 encryption at rest，密钥只在内存里。", ["设计"], "长期记忆 encryption", "mixed"),
    (
        "Rust 编译器笔记",
        "Rust 编译器的 borrow checker 报错，通常是生命周期写错了。",
        ["编程"],
        "Rust 编译器 borrow checker",
        "mixed",
    ),
    ("Python 性能优化", "用 cProfile 找热点，然后把循环换成 numpy 向量化。", ["编程"], "Python 性能 numpy", "mixed"),
    ("Docker 部署", "生产环境用 Docker Compose 部署，日志挂载到宿主机。", ["运维"], "Docker 部署 日志", "mixed"),
    ("Git 分支规范", "feature 分支从 main 切出，合并前必须 rebase。", ["编程"], "git rebase 分支", "mixed"),
    ("Ana 的咖啡机", "Ana 的咖啡机是 Gaggia Classic，每月除垢一次。", ["朋友"], "Ana 咖啡机", "mixed"),
    (
        "Kubernetes 排障",
        "Pod 一直 CrashLoopBackOff，最后发现是 ConfigMap 写错了。",
        ["运维"],
        "CrashLoopBackOff ConfigMap",
        "mixed",
    ),
    ("MacBook 电池", "MacBook 电池循环次数到了八百次，建议更换。", ["设备"], "MacBook 电池", "mixed"),
    ("VPN 设置", "公司 VPN 用 WireGuard，配置文件在 IT 门户下载。", ["工作"], "WireGuard VPN 配置", "mixed"),
    ("Redis 缓存策略", "Redis 缓存设置过期时间为十分钟，热点 key 单独预热。", ["编程"], "redis 缓存 过期", "mixed"),
    # Full-width input
    (
        "ＧＰＵ driver note",
        "After the upgrade the GPU driver needed a reboot before CUDA worked again.",
        ["work"],
        "gpu driver cuda",
        "en",
    ),
    ("Yoga class", "Tuesday yoga moved to the studio on Rue Cler; bring the blue mat.", ["sport"], "ｙｏｇａ studio", "en"),
    # Title vs body
    ("Lisbon", "Three days of pastel de nata and tram 28; stay in Alfama next time.", ["travel"], "Lisbon", "title"),
    (
        "Conference packing list",
        "Badge, chargers, the Lisbon hotel confirmation and business cards.",
        ["travel"],
        "conference packing chargers",
        "en",
    ),
    ("预算", "今年家庭预算：房贷、教育、旅行各占三分之一。", ["家庭"], "预算", "title"),
    ("旅行计划", "国庆去云南，昆明进大理出，预算八千。", ["旅行"], "云南 大理", "zh2"),
    (
        "Chess opening",
        "Learning the Sicilian Najdorf; the English Attack is what club players use against it.",
        ["hobby"],
        "Sicilian Najdorf",
        "en",
    ),
    ("Chess club", "The club meets on Wednesdays in the library; bring a clock.", ["hobby"], "chess club library", "en"),
    (
        "Insurance claim",
        "The water damage claim number is filed; the adjuster visits on Monday.",
        ["admin"],
        "water damage adjuster",
        "en",
    ),
    (
        "Parents' anniversary",
        "Mum and Dad's 40th anniversary is on 12 May; book the restaurant by the river.",
        ["family"],
        "parents anniversary restaurant",
        "en",
    ),
    ("Printer toner", "The office printer takes the TN-2420 toner cartridge.", ["office"], "printer toner cartridge", "en"),
    ("手机号码变更", "换了新手机号，银行和社保都要更新。", ["证件"], "社保", "zh2"),
    ("猫咪疫苗", "咪咪每年十一月打疫苗，宠物医院在小区门口。", ["宠物"], "疫苗", "zh2"),
]

PEOPLE_EN = ["Ana", "Bo", "Chen", "Dmitri", "Elena", "Farah", "Gus", "Hiro", "Ines", "Jonas", "Kemal", "Lea"]
PLACES_EN = ["the office", "the station", "the market", "the library", "the gym", "the cafe", "the park", "home"]
THINGS_EN = [
    "project plan",
    "budget",
    "coffee",
    "meeting notes",
    "travel ideas",
    "book club",
    "database",
    "security audit",
    "garden",
    "weekend plans",
    "new laptop",
    "encryption keys",
    "team lunch",
]
VERBS_EN = ["mentioned", "asked about", "forgot", "shared", "reviewed", "complained about", "suggested changes to"]
PEOPLE_ZH = ["李娜", "王芳", "张伟", "刘洋", "陈静", "赵磊", "孙丽", "周杰"]
PLACES_ZH = ["公司", "地铁上", "咖啡馆", "图书馆", "家里", "会议室", "食堂", "公园"]
THINGS_ZH = [
    "项目计划",
    "预算",
    "会议记录",
    "旅行",
    "读书会",
    "新电脑",
    "周末安排",
    "团队聚餐",
    "数据",
    "记忆",
    "安全审计",
    "健身",
]
VERBS_ZH = ["提到了", "问起", "忘了", "分享了", "讨论了", "抱怨了"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def fillers(count: int) -> list[dict[str, object]]:
    rng = random.Random(20261130)
    out: list[dict[str, object]] = []
    for i in range(count):
        if i % 2 == 0:
            p, q = rng.sample(PEOPLE_EN, 2)
            t1, t2 = rng.sample(THINGS_EN, 2)
            body = (
                f"{p} {rng.choice(VERBS_EN)} the {t1} at {rng.choice(PLACES_EN)} on {rng.choice(DAYS)}. "
                f"Later {q} {rng.choice(VERBS_EN)} the {t2}; we agreed to revisit it next week."
            )
            title = f"Note {i:03d}: {p} and the {t1}"
            tags = ["notes"]
        else:
            p, q = rng.sample(PEOPLE_ZH, 2)
            t1, t2 = rng.sample(THINGS_ZH, 2)
            body = f"{p}在{rng.choice(PLACES_ZH)}{rng.choice(VERBS_ZH)}{t1}。后来{q}{rng.choice(VERBS_ZH)}{t2}，下周再说。"
            title = f"随记 {i:03d}：{p}与{t1}"
            tags = ["随记"]
        out.append({"title": title, "body": body, "tags": tags})
    return out


def main() -> None:
    memories: list[dict[str, object]] = [{"title": t, "body": b, "tags": tags} for t, b, tags, _, _ in ANCHORS]
    memories += fillers(300 - len(memories))
    titles = [m["title"] for m in memories]
    assert len(set(titles)) == len(titles), "titles must be unique"
    queries = [{"query": q, "expected": [t], "category": c} for t, _, _, q, c in ANCHORS]
    with open(HERE / "search_eval_memories.jsonl", "w", encoding="utf-8") as handle:
        for memory in memories:
            handle.write(json.dumps(memory, ensure_ascii=False) + "\n")
    with open(HERE / "search_eval_queries.jsonl", "w", encoding="utf-8") as handle:
        for query in queries:
            handle.write(json.dumps(query, ensure_ascii=False) + "\n")
    print(f"{len(memories)} memories, {len(queries)} queries")


if __name__ == "__main__":
    main()
